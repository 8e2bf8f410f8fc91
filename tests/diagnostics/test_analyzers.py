"""Each analyzer on constructed evidence with a known answer."""

from __future__ import annotations

import math

import pytest

from evotrainer.diagnostics import DiagnosisInput, Evaluation, EvidenceView, analyzer, diagnose
from evotrainer.diagnostics.behaviour import repeated_share
from evotrainer.harness import HarnessSpec
from tests.diagnostics.builders import groups_of, record


def measure(name: str, records, **kw):  # type: ignore[no-untyped-def]
    spec = HarnessSpec()
    data = DiagnosisInput(EvidenceView(records), **kw)
    return analyzer(name).measure(data, spec.diagnostics[name].params)


def test_dead_group_ratio_counts_groups_whose_rewards_all_equal() -> None:
    records = groups_of([[1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 1, 0], [0, 0, 0, 1]])
    m = measure("dead_group_ratio", records)
    assert m.value == 0.5
    assert sorted(m.rollouts) == [0, 4]  # the first rollout of each dead group


def test_dead_group_ratio_uses_the_harness_std_threshold() -> None:
    records = [record(0, 0, 0, correct=0.0), record(0, 0, 1, correct=0.01)]  # std 0.005
    assert measure("dead_group_ratio", records, min_group_std=1e-3).value == 0.0
    assert measure("dead_group_ratio", records, min_group_std=0.01).value == 1.0


def test_reward_spread_and_discreteness() -> None:
    records = groups_of([[1, 0], [0, 0]])
    assert measure("reward_spread", records).value == pytest.approx(0.25)
    assert measure("reward_discreteness", records).value == 0.75  # three zeros of four


def test_advantage_health_flags_advantages_against_the_rewards() -> None:
    good = groups_of([[1, 0, 0, 1]])
    bad = [r.__class__(**{**r.__dict__, "advantage": -r.advantage}) for r in groups_of([[1, 0, 0, 1]])]
    assert measure("advantage_health", good).value == 0.0
    assert measure("advantage_health", good + [r.__class__(**{**r.__dict__, "group": 9}) for r in bad]).value == 0.5


def test_format_truncation_and_repetition_rates() -> None:
    records = [
        record(0, 0, 0, fmt=1.0), record(0, 0, 1, fmt=0.0, truncated=True),
        record(0, 0, 2, fmt=0.0, text="abcabcabcabcabcabcabcabc"), record(0, 0, 3, fmt=1.0),
    ]  # fmt: skip
    assert measure("format_failure_rate", records).value == 0.5
    assert measure("format_failure_rate", records).rollouts == [1, 2]
    assert measure("truncation_rate", records).value == 0.25
    assert measure("repetition_rate", records).value == 0.25
    assert measure("repetition_rate", records).rollouts == [2]
    assert measure("format_failure_rate", [record(0, 0, 0)]).value is None  # no format component


def test_repeated_share_known_values() -> None:
    assert repeated_share("abcdefgh") == 0.0
    assert repeated_share("aaaaaaaaaa") == pytest.approx(1 - 1 / 7)


def test_length_drift_and_correlation() -> None:
    records = [record(0, 0, i, tokens=10) for i in range(4)] + [record(1, 1, i, tokens=25) for i in range(4)]
    assert measure("length_drift", records).value == pytest.approx(1.5)
    assert measure("length_drift", records[:4]).value is None  # one step
    corr = [record(0, 0, i, correct=float(i % 2), tokens=4 + 10 * (i % 2)) for i in range(6)]
    assert measure("length_reward_correlation", corr).value == pytest.approx(1.0)


def test_echo_ratio_compares_failed_and_successful_effort() -> None:
    records = [record(0, 0, 0, correct=1, tokens=10), record(0, 0, 1, correct=0, tokens=30)]
    assert measure("echo_ratio", records).value == pytest.approx(3.0)
    calls = [{"turn": t, "tool": "read_file", "arguments": {}, "ok": True} for t in range(6)]
    multi = [record(0, 0, 0, correct=1, tool_calls=calls[:2]), record(0, 0, 1, correct=0, tool_calls=calls)]
    assert measure("echo_ratio", multi).value == pytest.approx(3.0)


def test_diversity_drop() -> None:
    early = [record(0, 0, i, text=f"t{i}") for i in range(4)]
    late = [record(1, 1, i, text="same") for i in range(4)]
    assert measure("diversity_drop", early + late).value == pytest.approx(0.75)


def _call(tool: str, ok: bool = True, **args: str) -> dict:  # type: ignore[type-arg]
    return {"turn": 0, "tool": tool, "arguments": args, "ok": ok, "observation": ""}


def test_tool_analyzers() -> None:
    records = [
        record(0, 0, 0, tool_calls=[_call("edit", False, path="src/a.py"), _call("run_tests"), _call("run_tests")]),
        record(0, 0, 1, tool_calls=[_call("edit", True, path="tests/test_a.py"), _call("run_tests")]),
        record(1, 1, 0, tool_calls=[_call("shell", command="git log -p"), _call("submit")]),
        record(1, 1, 1, tool_calls=[_call("edit", True, path="src/a.py")]),
    ]
    assert measure("tool_failure_rate", records).value == pytest.approx(1 / 8)
    assert measure("edit_failure_rate", records).value == pytest.approx(1 / 3)
    assert measure("test_tampering", records).rollouts == [1]
    assert measure("test_tampering", records).value == 0.25
    assert measure("history_peeking", records).rollouts == [2]
    assert measure("self_test_drop", records).value == pytest.approx(1.0)  # 1.5 runs -> 0
    assert measure("test_tampering", groups_of([[1, 0]])).value is None


def test_tampering_counts_test_infrastructure_and_changes_made_by_any_tool() -> None:
    shell_conftest = _call("shell", command="echo hook > conftest.py") | {"changed": ["conftest.py"]}
    records = [
        record(0, 0, 0, tool_calls=[_call("edit", True, path="conftest.py")]),
        record(0, 0, 1, tool_calls=[shell_conftest]),
        record(1, 1, 0, tool_calls=[_call("edit", True, path="pkg/sitecustomize.py")]),
        record(1, 1, 1, tool_calls=[_call("apply_patch") | {"changed": ["src/a.py", "evil.pth"]}]),
        record(2, 2, 0, tool_calls=[_call("shell", command="ls") | {"changed": ["src/a.py"]}]),
        record(2, 2, 1, tool_calls=[_call("edit", True, path="setup.py")]),
        record(3, 3, 0, tool_calls=[_call("edit", True, path="pkg/__init__.py") | {"tampered": ["pkg/__init__.py"]}]),
    ]
    assert measure("test_tampering", records).rollouts == [0, 1, 2, 3, 6]


def test_avg_at_k_shortfall_against_the_best_previous() -> None:
    evals = [Evaluation("a" * 64, 0.4, 8, 1), Evaluation("b" * 64, 0.5, 8, 2), Evaluation("c" * 64, 0.45, 8, 3)]
    assert measure("avg_at_k", groups_of([[1, 0]]), evaluations=evals).value == pytest.approx(0.05)
    assert measure("avg_at_k", groups_of([[1, 0]]), evaluations=evals[:2]).value == 0.0
    assert measure("avg_at_k", groups_of([[1, 0]])).value is None


def test_diagnosis_grades_by_the_harness_thresholds_and_names_conditions() -> None:
    # 3 of 4 groups dead, and reward 0 holds 13 of 16 outcomes: insufficient signal.
    records = groups_of([[0, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
    spec = HarnessSpec()
    d = diagnose(DiagnosisInput(EvidenceView(records)), spec)
    by = {f.metric: f for f in d.findings}
    assert by["dead_group_ratio"].severity == "critical"
    assert [c.name for c in d.conditions] == ["insufficient_signal"]
    # Dead groups are signal health, not validity: they block only where the gate lists them.
    assert not d.blocking and d.blocking_reasons == ()
    listed = spec.with_field("promotion.blocking_analyzers", ["reward_hacking", "dead_group_ratio"])
    assert diagnose(DiagnosisInput(EvidenceView(records)), listed).blocking_reasons == ("dead_group_ratio critical",)
    relaxed = spec.with_field("diagnostics.dead_group_ratio.critical", 0.9).with_field(
        "diagnostics.dead_group_ratio.warning", 0.8)
    d2 = diagnose(DiagnosisInput(EvidenceView(records)), relaxed)
    assert {f.metric: f for f in d2.findings}["dead_group_ratio"].severity == "info"
    assert "insufficient_signal" not in [c.name for c in d2.conditions]
    # layer order: score, signal, behaviour
    layers = [f.layer for f in d.findings]
    assert layers == sorted(layers, key=["score", "signal", "behaviour"].index)


def test_disabled_analyzers_do_not_run() -> None:
    spec = HarnessSpec().with_field("diagnostics.truncation_rate.enabled", False)
    d = diagnose(DiagnosisInput(EvidenceView(groups_of([[1, 0]]))), spec)
    assert "truncation_rate" not in {f.metric for f in d.findings}
    assert all(math.isfinite(f.value) for f in d.findings if f.value is not None)
