"""The rule engine: findings -> named conditions -> a suggested intervention (METHOD.md).

A rule fires on findings at warning severity or worse, i.e. on the harness's thresholds,
so changing a threshold in a harness version changes when a condition is diagnosed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from evotrainer.events import Finding

_ALERT = ("warning", "critical")


@dataclass(frozen=True)
class Condition:
    name: str
    because: str
    suggestion: str


@dataclass(frozen=True)
class Rule:
    name: str
    fires: Callable[[Mapping[str, Finding]], bool]
    because: str
    suggestion: str


def _alert(findings: Mapping[str, Finding], metric: str) -> bool:
    f = findings.get(metric)
    return f is not None and f.severity in _ALERT


def _not_rising(findings: Mapping[str, Finding]) -> bool:
    """No evidence that correctness improved (a Score shortfall, or no evaluation at all)."""
    score = findings.get("avg_at_k")
    return score is None or score.value is None or score.severity in _ALERT or score.value > 0


RULES: tuple[Rule, ...] = (
    Rule("insufficient_signal",
         lambda f: _alert(f, "dead_group_ratio") and _alert(f, "reward_discreteness"),
         "many groups are dead and one discrete reward value holds most outcomes",
         "make the reward more continuous (a partial-credit or judge component)"),
    Rule("echo_trap", lambda f: _alert(f, "echo_ratio"),
         "failed rollouts spend far more turns (or tokens) than the rest",
         "add an efficiency factor, context management or a turn cap"),
    Rule("exploration_collapse", lambda f: _alert(f, "diversity_drop") and
         (_alert(f, "repetition_rate") or _alert(f, "dead_group_ratio") or _alert(f, "reward_spread")),
         "completions within groups became alike while the signal weakened",
         "raise the temperature, add an exploration bonus or a KL constraint"),
    Rule("reward_hacking", lambda f: _alert(f, "reward_hacking"),
         "a shaped reward rose while correctness stayed flat or fell",
         "simplify the reward (drop process terms) or strengthen KL"),
    Rule("laziness", lambda f: _alert(f, "self_test_drop") and _not_rising(f),
         "test runs per rollout fell with no gain in correctness",
         "reward behaviour quality (self-testing)"),
    Rule("poor_edit_quality", lambda f: _alert(f, "edit_failure_rate"),
         "too many search/replace edits fail to apply",
         "train or prompt the edit format"),
    Rule("length_gaming", lambda f: _alert(f, "length_reward_correlation") and _alert(f, "length_drift"),
         "length grows and correlates with reward",
         "cap or penalise length, or drop the length-correlated term"),
    Rule("leaked_reference", lambda f: _alert(f, "history_peeking") or _alert(f, "test_tampering"),
         "rollouts probe history or edit tests",
         "scrub history, restore tests before grading, add a leak metric"),
)  # fmt: skip


def conditions(findings: Sequence[Finding], rules: Sequence[Rule] = RULES) -> list[Condition]:
    by_metric = {f.metric: f for f in findings}
    return [Condition(r.name, r.because, r.suggestion) for r in rules if r.fires(by_metric)]
