"""Backtests on hand-built evidence with known answers."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings

from evotrainer.backtest import NotBacktestableError, backtest_kind, rescore, run_backtest
from evotrainer.diagnostics import EvidenceView, diagnose
from evotrainer.diagnostics.inputs import diagnosis_input
from evotrainer.errors import UsageError
from evotrainer.evidence import RolloutRecord, from_jsonl, is_dead_group, to_jsonl
from evotrainer.harness import HarnessSpec
from tests.diagnostics.builders import record
from tests.diagnostics.test_properties import records

# (correctness, format) per rollout, one row per group of 4.
GROUPS = [
    [(0, 1), (0, 0), (0, 0), (0, 0)],  # dead; format varies -> rescued by a format weight
    [(0, 1), (0, 1), (0, 1), (0, 1)],  # dead; format constant -> stays dead
    [(1, 1), (1, 1), (1, 0), (1, 1)],  # dead (all correct); format varies -> rescued
    [(1, 0), (0, 1), (0, 1), (0, 1)],  # live; a big format weight would rank the wrong ones first
    [(0, 0), (0, 0), (0, 0), (0, 0)],  # dead, stays dead
]
EVIDENCE = [record(0, g, i, correct=c, fmt=f) for g, row in enumerate(GROUPS) for i, (c, f) in enumerate(row)]


def test_a_format_weight_rescues_the_dead_groups_it_can_and_orders_nothing_wrong() -> None:
    base = HarnessSpec()
    figures = run_backtest("reward", EVIDENCE, base, base.with_field("rewards.weights.format", 0.5))
    assert figures["groups"] == 5
    assert figures["dead_groups_before"] == 4
    assert figures["dead_groups_rescued"] == 2 and figures["rescued_groups"] == [0, 2]
    assert figures["dead_groups_after"] == 2 and figures["dead_groups_killed"] == 0
    assert figures["effective_data_fraction_before"] == pytest.approx(0.2)
    assert figures["effective_data_fraction_after"] == pytest.approx(0.6)
    assert figures["ordering_violations_introduced"] == 0


def test_a_heavy_format_weight_introduces_ordering_violations() -> None:
    base = HarnessSpec()
    figures = run_backtest("reward", EVIDENCE, base, base.with_field("rewards.weights.format", 2.0))
    assert figures["dead_groups_rescued"] == 2
    # in group 3 the one correct completion (reward 1) now ranks below three wrong ones (2)
    assert figures["ordering_violations_introduced"] == 3 and figures["ordering_violations_before"] == 0


def test_rescore_from_stored_components_and_missing_components() -> None:
    assert rescore(EVIDENCE[:2], {"correctness": 1.0, "format": 0.5}) == [0.5, 0.0]
    with pytest.raises(UsageError, match="no 'judge' reward component"):
        rescore(EVIDENCE[:1], {"judge": 1.0})
    assert rescore(EVIDENCE[:1], {"judge": 1.0}, lambda r, c: 0.25) == [0.25]


def test_a_shorter_budget_reports_the_correct_trajectories_it_would_cut() -> None:
    records = [record(0, 0, i, correct=c, tokens=t) for i, (c, t) in enumerate([(1, 4), (1, 12), (0, 16), (1, 20)])]
    base = HarnessSpec()
    figures = run_backtest("length", records, base, base.with_field("grpo.max_completion_length", 10))
    assert (figures["rollouts_cut"], figures["correct_cut"]) == (3, 2)
    assert figures["correct_cut_fraction"] == pytest.approx(2 / 3)
    assert figures["correct_cut_examples"] == [1, 3]


def test_a_group_filter_reports_the_effective_data_fraction() -> None:
    base = HarnessSpec()
    figures = run_backtest("filter", EVIDENCE, base, base.with_field("filters.drop_zero_variance_groups", True))
    assert figures["kept_fraction_before"] == 1.0 and figures["kept_fraction"] == pytest.approx(0.2)
    assert figures["effective_data_fraction"] == pytest.approx(0.2)


def test_fields_without_a_replay_are_named() -> None:
    assert backtest_kind("rewards.weights.judge") == "reward"
    with pytest.raises(NotBacktestableError, match="grpo.temperature"):
        backtest_kind("grpo.temperature")


NAN = math.nan
# Correctness per rollout; NaN is an unscored rollout (reward NaN too, as TRL records it).
NAN_GROUPS = [
    [NAN, 1, 1, 1],  # dead: the scored rollouts all agree
    [NAN, 0, 1, 1],  # live
    [NAN, NAN, NAN, NAN],  # dead: nothing scored
    [NAN, NAN, NAN, 1],  # dead: one scored reward has no spread
    [0, 1, 0, 1],  # live, no NaN
]


def test_a_diagnosis_and_the_backtests_call_the_same_groups_with_nan_rewards_dead() -> None:
    built = [record(0, g, i, correct=c) for g, row in enumerate(NAN_GROUPS) for i, c in enumerate(row)]
    evidence = from_jsonl(to_jsonl(built))  # NaN is stored as null and read back as NaN
    assert math.isnan(evidence[0].reward) and math.isnan(evidence[0].rewards["correctness"])
    base = HarnessSpec()
    finding = {f.metric: f for f in diagnose(diagnosis_input(evidence, base), base).findings}["dead_group_ratio"]
    assert finding.value == pytest.approx(3 / 5)
    assert sorted(evidence[i].group for i in finding.rollouts) == [0, 2, 3]

    reward = run_backtest("reward", evidence, base, base)  # a no-op change: "before" is the evidence as it stands
    assert reward["dead_group_ratio_before"] == finding.value == reward["dead_group_ratio_after"]
    filtering = run_backtest("filter", evidence, base, base.with_field("filters.drop_zero_variance_groups", True))
    assert filtering["kept_fraction"] == pytest.approx(1 - finding.value)  # groups of 4: rollouts share groups' fate
    assert filtering["effective_data_fraction_before"] == pytest.approx(1 - finding.value)


def test_nan_rule_leaves_unscored_rewards_out_of_the_spread() -> None:
    assert is_dead_group([NAN, 1.0, 1.0], 1e-3) and is_dead_group([NAN, NAN], 1e-3) and is_dead_group([], 1e-3)
    assert not is_dead_group([NAN, 0.0, 1.0], 1e-3) and is_dead_group([math.inf, 0.0], 1e-3)
    assert math.isnan(rescore([record(0, 0, 0, correct=NAN)], {"correctness": 1.0})[0])  # not scored 0


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records())
def test_the_diagnosis_and_the_filter_backtest_agree_on_any_evidence(recs: list[RolloutRecord]) -> None:
    spec = HarnessSpec()
    dead = set(EvidenceView(recs).dead_groups(spec.filters.min_group_std))
    figures = run_backtest("filter", recs, spec, spec.with_field("filters.drop_zero_variance_groups", True))
    live = sum(1 for r in recs if r.group not in dead)
    assert figures["kept_fraction"] == pytest.approx(live / (len(recs) or 1))
