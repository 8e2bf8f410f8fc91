"""Interventions change exactly one harness field and carry a falsifiable plan."""

from __future__ import annotations

import pytest

from evotrainer.errors import UsageError
from evotrainer.harness import (
    HarnessSpec,
    InvalidCriterionError,
    MultiFieldInterventionError,
    check_criterion,
    design_intervention,
)


def test_a_single_field_change_is_accepted_with_its_plan() -> None:
    base = HarnessSpec()
    d = design_intervention(base, {"rewards.weights.format": 0.2}, hypothesis="if format earns 0.2, groups revive")
    e = d.event
    assert (e.field, e.old_value, e.new_value) == ("rewards.weights.format", None, 0.2)
    assert e.base_harness_hash == base.address()
    assert "grpo" in e.frozen_fields and "rewards.weights.correctness" in e.frozen_fields
    assert "rewards.weights.format" not in e.frozen_fields
    assert e.rollback_plan.startswith("remove rewards.weights.format")
    assert d.candidate.rewards.weights["format"] == 0.2
    # same proposal on the same base: the same id (idempotent recording)
    again = design_intervention(base, {"rewards.weights.format": 0.2}, hypothesis="another wording")
    assert again.event.intervention_id == e.intervention_id


def test_multi_field_interventions_are_refused_naming_the_fields() -> None:
    with pytest.raises(MultiFieldInterventionError) as err:
        design_intervention(HarnessSpec(), {"grpo.temperature": 1.2, "grpo.beta": 0.1}, hypothesis="h")
    assert "changes 2: grpo.beta, grpo.temperature" in str(err.value)
    assert err.value.exit_code == 2


def test_a_mapping_value_that_changes_several_leaves_is_refused() -> None:
    with pytest.raises(MultiFieldInterventionError, match="rewards.weights.correctness, rewards.weights.format"):
        design_intervention(HarnessSpec(), {"rewards.weights": {"correctness": 2.0, "format": 1.0}}, hypothesis="h")


def test_filling_an_empty_mapping_counts_each_leaf() -> None:
    base = HarnessSpec()
    params = "diagnostics.dead_group_ratio.params"
    assert base.get_field(params) == {}
    with pytest.raises(MultiFieldInterventionError, match=f"{params}.a, {params}.b"):
        design_intervention(base, {params: {"a": 1.0, "b": 2.0}}, hypothesis="h")
    one = design_intervention(base, {params: {"a": 1.0}}, hypothesis="h").event
    assert one.field == params


def test_other_refusals() -> None:
    base = HarnessSpec()
    with pytest.raises(UsageError, match="changes nothing"):
        design_intervention(base, {"grpo.temperature": 1.0}, hypothesis="h")
    with pytest.raises(UsageError, match="must set one harness field"):
        design_intervention(base, {}, hypothesis="h")
    with pytest.raises(UsageError, match="hypothesis"):
        design_intervention(base, {"grpo.temperature": 2.0}, hypothesis="  ")
    with pytest.raises(UsageError, match="contains the field"):
        design_intervention(base, {"grpo.temperature": 2.0}, hypothesis="h", frozen_fields=["grpo"])
    with pytest.raises(InvalidCriterionError, match="METRIC OP NUMBER"):
        design_intervention(base, {"grpo.temperature": 2.0}, hypothesis="h", success_criterion="it gets better")


def test_criteria_check_the_clauses_they_have_figures_for() -> None:
    v = check_criterion("dead_groups_rescued >= 2 and avg_at_k_gain > 0", {"dead_groups_rescued": 3})
    assert v.passed and v.held == ("dead_groups_rescued >= 2",) and v.unchecked == ("avg_at_k_gain > 0",)
    assert not check_criterion("dead_groups_rescued >= 5", {"dead_groups_rescued": 3}).passed
    assert not check_criterion("avg_at_k_gain > 0", {"dead_groups_rescued": 3}).passed  # nothing checkable
