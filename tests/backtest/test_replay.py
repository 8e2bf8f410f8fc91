"""Backtests on hand-built evidence with known answers."""

from __future__ import annotations

import pytest

from evotrainer.backtest import NotBacktestableError, backtest_kind, rescore, run_backtest
from evotrainer.errors import UsageError
from evotrainer.harness import HarnessSpec
from tests.diagnostics.builders import record

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
