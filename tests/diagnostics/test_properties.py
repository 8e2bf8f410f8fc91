"""Every analyzer on Hypothesis-generated evidence: never crashes, bounded outputs."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evotrainer.diagnostics import BUILTIN, DiagnosisInput, Evaluation, EvidenceView, diagnose
from evotrainer.evidence import RolloutRecord, from_jsonl, to_jsonl
from evotrainer.harness import HarnessSpec

# Metrics that are shares or probabilities stay in [0, 1]; correlation in [-1, 1].
UNIT = {"dead_group_ratio", "reward_discreteness", "advantage_health", "format_failure_rate", "truncation_rate",
        "repetition_rate", "tool_failure_rate", "edit_failure_rate", "test_tampering", "history_peeking"}  # fmt: skip

# Any text but lone surrogates, which cannot be UTF-8 encoded and no tokenizer decodes to
# (Unicode line breaks included: evidence.from_jsonl splits records on "\n" only).
TEXT = st.characters(blacklist_categories=("Cs",))
values = st.one_of(st.sampled_from([0.0, 1.0, 0.5]), st.floats(-5, 5), st.just(math.nan))
calls = st.lists(st.fixed_dictionaries({
    "turn": st.integers(0, 9), "tool": st.sampled_from(["edit", "run_tests", "shell", "read_file", "git"]),
    "arguments": st.fixed_dictionaries({"path": st.sampled_from(["a.py", "tests/t.py", ""]),
                                        "command": st.sampled_from(["ls", "git log", ""])}),
    "ok": st.booleans()}), max_size=3)  # fmt: skip


@st.composite
def records(draw) -> list[RolloutRecord]:  # type: ignore[no-untyped-def]
    n = draw(st.integers(0, 24))
    out = []
    for i in range(n):
        rewards = draw(st.dictionaries(st.sampled_from(["correctness", "format", "judge"]), values, max_size=3))
        out.append(RolloutRecord(
            step=draw(st.integers(0, 3)), group=draw(st.integers(0, 4)), index=i, prompt_id="p",
            text=draw(st.text(alphabet=TEXT, max_size=30)), prompt_tokens=3, completion_tokens=draw(st.integers(0, 50)),
            truncated=draw(st.booleans()), rewards=rewards, reward=draw(values), advantage=draw(values),
            tool_calls=tuple(draw(calls)),
        ))  # fmt: skip
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records(), st.lists(st.floats(0, 1), max_size=3))
def test_analyzers_never_crash_and_stay_bounded(recs: list[RolloutRecord], avgs: list[float]) -> None:
    spec = HarnessSpec().with_field("rewards.weights.format", 0.3)
    evals = [Evaluation("a" * 64, a, 4, i) for i, a in enumerate(avgs)]
    data = DiagnosisInput(EvidenceView(recs), evals, reward_weights=spec.rewards.weights)
    d = diagnose(data, spec)
    assert {f.metric for f in d.findings} == {a.name for a in BUILTIN}
    for f in d.findings:
        assert f.value is None or math.isfinite(f.value)
        assert all(0 <= i < len(recs) for i in f.rollouts) and len(f.rollouts) <= 20
        if f.metric in UNIT and f.value is not None:
            assert 0 <= f.value <= 1, f
        if f.metric == "length_reward_correlation" and f.value is not None:
            assert -1 - 1e-9 <= f.value <= 1 + 1e-9
    d.event("0" * 64, spec.address())  # the payload validates


@settings(max_examples=50, deadline=None)
@given(records())
def test_diagnosis_survives_the_evidence_round_trip(recs: list[RolloutRecord]) -> None:
    spec = HarnessSpec()
    direct = diagnose(DiagnosisInput(EvidenceView(sorted(recs, key=lambda r: (r.step, r.group, r.index)))), spec)
    stored = diagnose(DiagnosisInput(EvidenceView(from_jsonl(to_jsonl(recs)))), spec)
    assert [(f.metric, f.severity) for f in direct.findings] == [(f.metric, f.severity) for f in stored.findings]
