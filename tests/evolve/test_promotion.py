"""The promotion gate on the real store: it promotes only a candidate that beats the best
so far beyond noise (the lower bound of a paired bootstrap interval of the per-problem gain
clears the incumbent's margin) with no blocking validity diagnostic, records why, and
refuses to judge without the evidence it needs."""

from __future__ import annotations

from pathlib import Path

import pytest

from evotrainer.artifacts import open_store
from evotrainer.errors import ConcurrencyError, UsageError
from evotrainer.evolve import decide_promotion, fork_for_intervention, incumbent_of, record_promotion
from evotrainer.evolve.promotion import judged_by_the_gate
from evotrainer.evolve.skills import skill_event, skill_library
from evotrainer.harness import HarnessSpec
from evotrainer.harness.versions import branch_harness, versioned_event
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, NewEvent, StoredEvent
from tests.evolve.builders import evaluate, finding, propose, start, trained

BASE = [0.5, 0.5, 0.25, 0.25]  # Avg@k 0.375
MANY = 20
"""Copies of a 4-problem pattern: 80 problems, enough for an interval that can clear 0."""


def candidate(store: EventStore, main: BranchRef, name: str, field: str = "grpo.learning_rate",
              value: object = 2e-5) -> BranchRef:  # fmt: skip
    """A branch forked for an intervention on main (a field no backtest replays)."""
    iid = propose(store, main, field, value, criterion="avg_at_k_gain >= 0.05")
    fork_for_intervention(store, main, name, iid)
    return BranchRef("demo", name)


def two_candidates(store: EventStore) -> tuple[BranchRef, BranchRef, BranchRef]:
    """main, evaluated at BASE (80 problems), and two forks for different interventions on it."""
    main = start(store)
    evaluate(store, main, BASE * MANY)
    return main, candidate(store, main, "a"), candidate(store, main, "b", "grpo.temperature", 1.2)


def test_a_candidate_that_beats_main_beyond_noise_is_promoted_and_becomes_the_best(
    store: EventStore, tmp_path: Path
) -> None:
    artifacts = open_store(tmp_path / "artifacts")
    main = start(store)
    evaluate(store, main, BASE * MANY, artifacts)
    lr = candidate(store, main, "lr-up")
    trained(store, lr, "lr-up")
    evaluate(store, lr, [0.75, 0.5, 0.5, 0.25] * MANY, artifacts)  # 0.5: +0.125

    decision, stored = record_promotion(store, lr, artifacts)
    assert decision.promoted and (stored.branch, stored.type) == ("main", "PromotionDecided")
    p = stored.payload
    assert (p["baseline_score"], p["candidate_score"], p["margin"]) == (0.375, 0.5, 0.125)
    assert p["intervention_id"].startswith("iv-") and p["blocking_findings"] == []
    paired = p["evidence"]["per_problem"]
    assert {k: paired[k] for k in ("problems", "better", "worse", "same", "mean_gain")} == {
        "problems": 80, "better": 40, "worse": 0, "same": 40, "mean_gain": 0.125}
    assert paired["standard_error"] == pytest.approx(0.125 / 79**0.5)  # gains .25 0 .25 0 ...: sd/sqrt(80)
    assert (paired["confidence"], paired["bootstrap_samples"]) == (0.95, 2000)
    low, high = paired["interval"]
    assert 0 < low < 0.125 < high < 0.25
    assert p["reason"] == (f"promoted: avg@4 0.5000 against 0.3750 of demo/main (gain +0.1250, 95% interval of the "
                           f"gain [{low:+.4f}, {high:+.4f}], must clear 0), no blocking diagnostic")  # fmt: skip
    assert p["evidence"]["criterion"]["outcome"] == "success"
    assert p["evidence"]["gate"]["min_margin"] == 0.0
    assert incumbent_of(store, "demo") == lr

    # The same evidence judged again is the same decision, not a second one.
    head = store.head(main)[0]
    _, again = record_promotion(store, lr, artifacts)
    assert again.event_id == stored.event_id and store.head(main)[0] == head
    assert decide_promotion(store, lr, artifacts).decided.candidate_score == 0.5


def test_a_gain_within_noise_is_rejected_and_main_stays_the_best(store: EventStore) -> None:
    main = start(store)
    evaluate(store, main, [0.5] * 40)
    temp = candidate(store, main, "temp", "grpo.temperature", 1.1)
    trained(store, temp, "temp")
    # 12 problems better, 10 worse: +0.0125 on average, which the old margin (0.01) let through.
    evaluate(store, temp, [0.75] * 12 + [0.25] * 10 + [0.5] * 18)
    decision, stored = record_promotion(store, temp)
    assert not decision.promoted and stored.payload["decision"] == "rejected"
    assert stored.payload["margin"] == pytest.approx(0.0125)
    low, high = stored.payload["evidence"]["per_problem"]["interval"]
    assert low < 0 < 0.0125 < high
    assert stored.payload["reason"] == (
        "rejected: does not beat the best so far beyond noise; avg@4 0.5125 against 0.5000 of demo/main "
        f"(gain +0.0125, 95% interval of the gain [{low:+.4f}, {high:+.4f}], must clear 0)")
    assert stored.payload["evidence"]["criterion"]["outcome"] == "failure"
    assert incumbent_of(store, "demo") == main
    with pytest.raises(UsageError, match="demo/main is the best so far already"):
        decide_promotion(store, main)


def test_without_both_results_artifacts_the_gate_has_no_interval_and_rejects(store: EventStore, tmp_path: Path) -> None:
    main = start(store)
    evaluate(store, main, BASE * MANY)
    up = candidate(store, main, "up")
    trained(store, up, "up")
    evaluate(store, up, [1.0] * 80, stored=False)  # a clear gain, but its results are kept nowhere
    for artifacts in (None, open_store(tmp_path / "empty")):  # the gate's store lacks one, another both
        decision = decide_promotion(store, up, artifacts)
        assert not decision.promoted and decision.decided.evidence["per_problem"] is None
        assert decision.decided.reason == (
            "rejected: the per-problem results of both evaluations are needed for the gate's interval; "
            "avg@4 1.0000 against 0.3750 of demo/main (gain +0.6250, no per-problem interval, must clear 0)")
    evaluate(store, up, [1.0] * 80)  # evaluated again, its results stored: judged on them
    assert decide_promotion(store, up).promoted


def test_a_small_gain_over_many_problems_clears_the_noise_and_a_larger_one_over_few_does_not(
    store: EventStore,
) -> None:
    main = start(store)
    evaluate(store, main, [0.5] * 4)
    evaluate(store, main, [0.5] * 100)  # the same policy under a second protocol (100 problems)
    few, many = candidate(store, main, "few"), candidate(store, main, "many", "grpo.temperature", 1.2)
    trained(store, few, "few")
    evaluate(store, few, [0.75, 0.5, 0.5, 0.5])  # +0.0625: one problem of four better
    trained(store, many, "many")
    evaluate(store, many, [0.75] * 10 + [0.5] * 90)  # +0.025: ten of a hundred better, none worse
    rejected, promoted = decide_promotion(store, few), decide_promotion(store, many)
    assert rejected.decided.margin > promoted.decided.margin
    assert not rejected.promoted and rejected.decided.evidence["per_problem"]["interval"][0] == 0.0
    assert "does not beat the best so far beyond noise" in rejected.decided.reason
    assert promoted.promoted and promoted.decided.evidence["per_problem"]["interval"][0] > 0


def test_the_interval_is_recorded_and_only_a_lower_bound_above_the_margin_promotes(store: EventStore) -> None:
    """The decision follows the recorded interval's lower bound, not the mean gain: a gate
    whose margin is the lower bound itself (not strictly above) or anything above it
    rejects, one just below it promotes."""
    main = start(store)
    evaluate(store, main, [0.5] * 100)
    t = candidate(store, main, "t", "grpo.temperature", 1.1)
    trained(store, t, "t")
    evaluate(store, t, [0.75] * 30 + [0.25] * 5 + [0.5] * 65)  # +0.0625
    default = decide_promotion(store, t)
    per_problem = default.decided.evidence["per_problem"]
    (low, high), gain = per_problem["interval"], default.decided.margin
    assert (per_problem["confidence"], per_problem["bootstrap_samples"], per_problem["problems"]) == (0.95, 2000, 100)
    assert 0 < low < gain < high and default.promoted
    assert decide_promotion(store, t).decided.evidence["per_problem"] == per_problem  # deterministic
    for margin, promoted in ((round(low, 4) - 0.0001, True), (low, False), (round(low, 4) + 0.0001, False),
                             (gain, False)):  # fmt: skip
        gate = HarnessSpec().with_field("promotion.min_margin", margin)
        store.append(main, [versioned_event(gate, branch_harness(store, main).address, ["promotion.min_margin"])])
        decision = decide_promotion(store, t)
        assert decision.decided.evidence["gate"]["min_margin"] == margin
        assert decision.decided.evidence["per_problem"]["interval"] == [low, high]
        assert decision.promoted is promoted, (margin, low)
        assert decision.decided.reason.startswith("promoted: " if promoted else
                                                  "rejected: does not beat the best so far beyond noise")  # fmt: skip
        assert f"must clear {margin:g})" in decision.decided.reason


def test_a_validity_finding_blocks_even_a_large_gain_and_a_signal_health_one_does_not(store: EventStore) -> None:
    main = start(store)
    evaluate(store, main, BASE * MANY)
    hack, tamper, dead = (candidate(store, main, name, "grpo.temperature", t)
                          for name, t in (("hack", 1.1), ("tamper", 1.2), ("dead", 1.3)))  # fmt: skip
    trained(store, hack, "hack", findings=[finding("reward_hacking", 0.5, "critical"),
                                           finding("dead_group_ratio", 0.7, "critical")],
            conditions=["reward_hacking"])  # fmt: skip
    trained(store, tamper, "tamper", findings=[finding("test_tampering", 0.25, "critical")])
    trained(store, dead, "dead", findings=[finding("dead_group_ratio", 0.7, "critical"),
                                           finding("truncation_rate", 0.7, "critical")])  # fmt: skip
    for ref in (hack, tamper, dead):
        evaluate(store, ref, [1.0] * 80)
    hacked, tampered, sparse = (decide_promotion(store, ref) for ref in (hack, tamper, dead))
    assert not hacked.promoted
    assert hacked.decided.blocking_findings == ["reward_hacking critical", "condition reward_hacking"]
    assert hacked.decided.reason.startswith("rejected: blocking diagnostic (reward_hacking critical; ")
    assert not tampered.promoted
    assert tampered.decided.blocking_findings == ["test_tampering critical", "condition leaked_reference"]
    # Dead groups and truncation say how well a run learns, not whether its score is real.
    assert sparse.promoted and sparse.decided.blocking_findings == []
    assert sparse.decided.reason.endswith(", no blocking diagnostic")


def test_the_incumbents_gate_judges_not_the_candidates_own(store: EventStore) -> None:
    """An intervention that lowers the gate's margin is itself judged by the old margin."""
    main = start(store, HarnessSpec().with_field("promotion.min_margin", 0.05))
    evaluate(store, main, [0.5] * 100)
    loose = candidate(store, main, "loose", "promotion.min_margin", 0.0)
    trained(store, loose, "loose")
    evaluate(store, loose, [0.75] * 20 + [0.5] * 80)  # +0.05: clears its own gate's 0, not main's 0.05
    decision = decide_promotion(store, loose)
    low = decision.decided.evidence["per_problem"]["interval"][0]
    assert 0 < low < 0.05
    assert not decision.promoted and decision.decided.evidence["gate"]["min_margin"] == 0.05
    assert decision.decided.reason.endswith("must clear 0.05)")


def test_a_candidate_cannot_take_its_finding_off_the_incumbents_blocking_list(store: EventStore) -> None:
    main = start(store)
    evaluate(store, main, BASE * MANY)
    lax = candidate(store, main, "lax", "promotion.blocking_analyzers", ["test_tampering"])
    trained(store, lax, "lax", findings=[finding("reward_hacking", 0.5, "critical")])
    evaluate(store, lax, [1.0] * 80)
    decision = decide_promotion(store, lax)
    assert not decision.promoted and "reward_hacking critical" in decision.decided.blocking_findings


def test_a_stricter_severity_in_the_incumbents_gate_blocks_warnings(store: EventStore) -> None:
    strict = HarnessSpec().with_field("promotion.blocking_severity", "warning")
    main = start(store, strict)
    evaluate(store, main, BASE * MANY)
    warned = candidate(store, main, "warned")
    trained(store, warned, "warned", findings=[finding("echo_ratio", 2.0, "warning"),
                                               finding("truncation_rate", 0.3, "warning")])  # fmt: skip
    evaluate(store, warned, [1.0] * 80)
    decision = decide_promotion(store, warned)
    assert not decision.promoted and decision.decided.blocking_findings == ["echo_ratio warning"]


def test_a_gate_that_lists_a_signal_health_analyzer_lets_it_veto(store: EventStore) -> None:
    listed = HarnessSpec().with_field("promotion.blocking_analyzers", ["reward_hacking", "dead_group_ratio"])
    main = start(store, listed)
    evaluate(store, main, BASE * MANY)
    dead = candidate(store, main, "dead")
    trained(store, dead, "dead", findings=[finding("dead_group_ratio", 0.7, "critical")])
    evaluate(store, dead, [1.0] * 80)
    decision = decide_promotion(store, dead)
    assert not decision.promoted and decision.decided.blocking_findings == ["dead_group_ratio critical"]


def test_missing_evidence_is_refused_with_the_command_that_supplies_it(store: EventStore) -> None:
    main = start(store)
    evaluate(store, main, BASE)
    c = candidate(store, main, "c")
    with pytest.raises(UsageError, match=r"no training run of its own: train it"):
        decide_promotion(store, c)
    trained(store, c, "c", diagnosed=False)
    with pytest.raises(UsageError, match=r"has no diagnosis: run `evotrainer diagnose demo/c`"):
        decide_promotion(store, c)
    trained(store, c, "c2")
    with pytest.raises(UsageError, match=r"demo/c has no evaluation of its newest policy .*evotrainer evaluate demo/c"):
        decide_promotion(store, c)
    evaluate(store, c, [1.0, 1.0, 1.0], k=8)
    with pytest.raises(UsageError, match=r"demo/main \(the best so far\) has no evaluation .* under the candidate's "
                                         r"protocol \(domain \"math:digit_add\", k 8, eval_tasks 3"):  # fmt: skip
        decide_promotion(store, c)
    head = store.head(main)[0]
    with pytest.raises(UsageError):
        record_promotion(store, c)
    assert store.head(main)[0] == head  # nothing written


def test_two_gates_deciding_at_once_cannot_both_promote_against_one_incumbent(store: EventStore) -> None:
    main, a, b = two_candidates(store)
    for ref, scores in ((a, [1.0, 1.0, 0.5, 0.5] * MANY), (b, [1.0, 0.5, 0.5, 0.5] * MANY)):
        trained(store, ref, ref.branch)
        evaluate(store, ref, scores)
    b_decided_early = decide_promotion(store, b)  # against main: +0.25, would be promoted
    assert b_decided_early.promoted
    record_promotion(store, a)  # a wins the race: 0.75
    with pytest.raises(ConcurrencyError):
        store.append(b_decided_early.record_on, b_decided_early.events(), expected_seq=b_decided_early.expected_seq)
    decision, stored = record_promotion(store, b)  # decided again, against a
    assert decision.incumbent == a and stored.payload["decision"] == "rejected"
    assert stored.payload["baseline_score"] == 0.75
    assert incumbent_of(store, "demo") == a


def test_each_verdict_on_an_intervention_adds_an_outcome_to_its_skill(store: EventStore) -> None:
    main = start(store)
    evaluate(store, main, BASE * MANY)
    # Two conditions: the skill goes under the one a temperature change answers, not the first.
    store.append(main, [NewEvent("DiagnosisRecorded", {"evidence": "e" * 64, "findings": [],
                                                       "conditions": ["insufficient_signal", "exploration_collapse"]},
                                   idempotency_key=f"diagnosis:{'e' * 64}:None")])  # as `diagnose` keys it; fmt: skip
    hot = candidate(store, main, "hot", "grpo.temperature", 1.3)
    trained(store, hot, "hot")
    evaluate(store, hot, [1.0, 0.5, 0.25, 0.25] * MANY)  # +0.125
    decision, _ = record_promotion(store, hot)
    assert decision.promoted and decision.skill is not None
    skill = decision.skill
    assert (skill.skill_id, skill.successes, skill.failures, skill.domains, skill.category) == (
        "exploration_collapse/grpo.temperature/raise", 1, 0, ["math"], "training_stability")
    assert [e.type for e in store.read_branch(main)][-2:] == ["PromotionDecided", "SkillRecorded"]
    library = skill_library(store)
    assert library.rank("math:arithmetic", "exploration_collapse", "grpo.temperature", "raise") == 1.0
    # Not validated in code yet, and not general: it says nothing there.
    assert library.rank("code", "exploration_collapse", "grpo.temperature", "raise") == 0.0
    assert not library.skills[skill.skill_id].general


def test_a_skill_validated_in_two_domains_joins_the_shared_library(store: EventStore) -> None:
    for experiment, domain in (("m", "math:digit_add"), ("c", "code:trivial")):
        store.create_experiment(experiment)
        main = BranchRef(experiment, "main")
        outcome = skill_event(_proposal(store, main), "insufficient_signal", domain, True, 0.05)
        store.append(main, [NewEvent.of(outcome)])
    library = skill_library(store)
    (skill,) = library.skills.values()
    assert skill.general and skill.validated_in == {"math", "code"} and skill.mean_effect == pytest.approx(0.05)
    assert library.rank("swe", "insufficient_signal", "rewards.weights.format", "add") == 2.0


def _proposal(store: EventStore, main: BranchRef) -> StoredEvent:
    store.append(main, [versioned_event(HarnessSpec())])
    propose(store, main, "rewards.weights.format", 0.2)
    return store.read_branch(main)[-1]


def test_the_baseline_is_the_policy_that_won_not_what_its_branch_trained_since(store: EventStore) -> None:
    main, a, b = two_candidates(store)
    trained(store, a, "a")
    evaluate(store, a, [1.0] * 80)
    assert record_promotion(store, a)[0].promoted
    trained(store, a, "a-later")  # a trains on, worse, and is evaluated: never promoted
    evaluate(store, a, [0.5] * 80)
    trained(store, b, "b")
    evaluate(store, b, [0.75] * 80)
    decision = decide_promotion(store, b)
    assert decision.decided.baseline_score == 1.0 and not decision.promoted


@pytest.mark.parametrize("field, value, recorded, expected", [
    ("diagnostics.dead_group_ratio.enabled", False, None, "dead_group_ratio not measured"),
    ("diagnostics.reward_hacking.critical", 0.9, finding("reward_hacking", 0.5, "warning"),
     "reward_hacking critical"),
])  # fmt: skip
def test_a_candidate_cannot_loosen_the_diagnostics_it_is_judged_by(
    store: EventStore, field: str, value: object, recorded: dict | None, expected: str  # type: ignore[type-arg]
) -> None:
    main = start(store)
    evaluate(store, main, BASE * MANY)
    loose = candidate(store, main, "loose", field, value)
    # Turned off, the analyzer (any the incumbent runs, validity or not) is missing from the
    # candidate's diagnosis; with a raised threshold, a reward-hacking score of 0.5 was only
    # a warning under the candidate's own harness.
    trained(store, loose, "loose", findings=[recorded] if recorded else [],
            unmeasured=() if recorded else ("dead_group_ratio",))  # fmt: skip
    evaluate(store, loose, [1.0] * 80)
    decision = decide_promotion(store, loose)
    assert not decision.promoted and expected in decision.decided.blocking_findings


def test_a_changed_gate_is_a_new_decision_on_the_same_evidence(store: EventStore) -> None:
    main = start(store, HarnessSpec().with_field("promotion.min_margin", 0.05))
    evaluate(store, main, [0.5] * 100)
    t = candidate(store, main, "t", "grpo.temperature", 1.1)
    trained(store, t, "t")
    evaluate(store, t, [0.75] * 20 + [0.5] * 80)  # +0.05: its interval's lower bound is below 0.05
    first, stored_first = record_promotion(store, t)
    assert not first.promoted
    looser = HarnessSpec()  # min_margin 0
    store.append(main, [versioned_event(looser, branch_harness(store, main).address, ["promotion.min_margin"])])
    second, stored_second = record_promotion(store, t)
    assert second.promoted and stored_second.payload["decision"] == "promoted"
    assert stored_second.event_id != stored_first.event_id
    # One run, one outcome: the skill keeps the first verdict.
    skills = [e for e in store.read_branch(main) if e.type == "SkillRecorded"]
    assert len(skills) == 1 and skills[0].payload["failures"] == 1


def test_a_promotion_appended_by_hand_makes_no_best_so_far(store: EventStore) -> None:
    main, a, b = two_candidates(store)
    trained(store, a, "a")
    evaluate(store, a, [1.0, 1.0, 0.5, 0.5] * MANY)
    # Without the gate's evidence, and with a copy of a real verdict's evidence under
    # another key (the gate's own key would only find the verdict it recorded).
    store.append(main, [NewEvent("PromotionDecided", {"candidate": "demo/a", "decision": "promoted"})])
    assert incumbent_of(store, "demo") == main
    trained(store, b, "b")
    evaluate(store, b, [0.5, 0.5, 0.25, 0.25] * MANY)  # no gain: rejected
    verdict = record_promotion(store, b)[1]
    assert verdict.payload["decision"] == "rejected"
    store.append(main, [NewEvent("PromotionDecided", {**verdict.payload, "decision": "promoted"},
                                 idempotency_key=f"{verdict.idempotency_key}:again")])  # fmt: skip
    assert incumbent_of(store, "demo") == main
    judged = judged_by_the_gate(store, store.read_branch(main))
    assert [why for _, why in judged] == [
        "recorded without the gate's evidence", None,
        "not recorded by the gate (its key is not the one the gate derives from its evidence)"]
    # a is judged against main, where the gate's verdicts say the best so far still is.
    decision = decide_promotion(store, a)
    assert decision.decided.baseline_score == 0.375 and decision.promoted


def test_results_appended_by_hand_are_no_evidence_for_the_gate(store: EventStore) -> None:
    main, a, _ = two_candidates(store)
    trained(store, a, "a")
    evaluate(store, a, [0.75, 0.5, 0.5, 0.25] * MANY)  # 0.5 against main's 0.375
    # A lower baseline for main's policy and a perfect score for a, appended by hand: the
    # gate takes the latest evaluation of a policy, but only one that an evaluate task made.
    for ref, score in ((main, 0.0), (a, 1.0)):
        latest = next(e for e in reversed(store.read_branch(ref)) if e.type == "EvaluationRecorded")
        store.append(ref, [NewEvent("EvaluationRecorded", {**latest.payload, "avg_at_k": score})])
    decided = decide_promotion(store, a).decided
    assert (decided.baseline_score, decided.candidate_score) == (0.375, 0.5)
    # A diagnosis appended by hand (no task, not the command's key) is no diagnosis.
    c = candidate(store, main, "c", "grpo.temperature", 0.7)
    trained(store, c, "c", diagnosed=False)
    evaluate(store, c, [1.0] * 80)
    evidence = next(e.payload["evidence_sha256"] for e in store.read_branch(c) if e.type == "RolloutsRecorded")
    store.append(c, [NewEvent("DiagnosisRecorded", {"evidence": evidence, "findings": [], "conditions": []})])
    with pytest.raises(UsageError, match="has no diagnosis"):
        decide_promotion(store, c)
