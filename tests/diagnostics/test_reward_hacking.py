"""A format bonus that can be earned with a wrong answer is flagged as reward hacking."""

from __future__ import annotations

from evotrainer.diagnostics import DiagnosisInput, EvidenceView, diagnose
from evotrainer.harness import HarnessSpec
from tests.diagnostics.builders import record

WEIGHTS = {"correctness": 1.0, "format": 0.5}


def run(format_late: float, correct_late: float) -> list:  # type: ignore[type-arg]
    """Steps 0-1: 25% correct, 25% well formatted; steps 2-3: the given shares (of 8)."""
    out = []
    for step in range(4):
        late = step >= 2
        n_fmt = round(8 * (format_late if late else 0.25))
        n_ok = round(8 * (correct_late if late else 0.25))
        for i in range(8):
            out.append(record(step, step, i, correct=float(i < n_ok), fmt=float(i < n_fmt) if i >= n_ok or late
                              else float(i < n_fmt), weights=WEIGHTS, text=f"{step}-{i}"))  # fmt: skip
    return out


def test_format_bonus_earned_with_wrong_answers_is_flagged() -> None:
    spec = HarnessSpec().with_field("rewards.weights.format", 0.5)
    records = run(format_late=1.0, correct_late=0.25)  # format 25% -> 100%, correctness flat
    d = diagnose(DiagnosisInput(EvidenceView(records), reward_weights=spec.rewards.weights), spec)
    hacking = {f.metric: f for f in d.findings}["reward_hacking"]
    assert hacking.value == 0.75
    assert hacking.severity == "critical"
    # it points at later rollouts that got the bonus with a wrong answer (indices 16.. are steps 2-3)
    assert hacking.rollouts and all(i >= 16 and not records[i].rewards["correctness"] for i in hacking.rollouts)
    assert "reward_hacking" in [c.name for c in d.conditions]
    assert d.blocking and "condition reward_hacking" in d.blocking_reasons


def test_shaped_gain_with_correctness_gain_is_not_hacking() -> None:
    spec = HarnessSpec().with_field("rewards.weights.format", 0.5)
    records = run(format_late=1.0, correct_late=1.0)
    d = diagnose(DiagnosisInput(EvidenceView(records), reward_weights=spec.rewards.weights), spec)
    hacking = {f.metric: f for f in d.findings}["reward_hacking"]
    assert hacking.value == 0.0 and hacking.severity == "info"


def test_unweighted_format_is_not_a_shaped_reward() -> None:
    spec = HarnessSpec()  # correctness only: format is reported but not rewarded
    d = diagnose(DiagnosisInput(EvidenceView(run(1.0, 0.25)), reward_weights=spec.rewards.weights), spec)
    assert {f.metric: f for f in d.findings}["reward_hacking"].value is None
