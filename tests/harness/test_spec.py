"""Harness specs: content addresses, dotted fields, diffs, the GRPOSettings mapping."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evotrainer.harness import HarnessSpec, InvalidHarnessError, diff
from evotrainer.harness.spec import leaves


def test_the_address_is_the_hash_of_the_canonical_json_and_survives_a_round_trip() -> None:
    spec = HarnessSpec()
    again = HarnessSpec.parse(spec.to_json())
    assert again.address() == spec.address() and len(spec.address()) == 64
    assert spec.with_field("grpo.temperature", 1.2).address() != spec.address()


def test_method_thresholds_are_defaults_in_the_spec() -> None:
    d = HarnessSpec().diagnostics
    assert (d["dead_group_ratio"].warning, d["dead_group_ratio"].critical) == (0.3, 0.5)
    assert d["reward_spread"].direction == "below" and d["reward_spread"].warning == 0.05
    assert d["truncation_rate"].warning == 0.2
    assert HarnessSpec().filters.min_group_std == 1e-3


def test_fields_by_dotted_path() -> None:
    spec = HarnessSpec()
    assert spec.get_field("diagnostics.dead_group_ratio.warning") == 0.3
    assert spec.with_field("rewards.weights.format", 0.2).rewards.weights == {"correctness": 1.0, "format": 0.2}
    with pytest.raises(InvalidHarnessError, match="grpo has fields beta, epsilon"):
        spec.with_field("grpo.temprature", 1.0)
    with pytest.raises(InvalidHarnessError, match="greater than 0"):
        spec.with_field("grpo.temperature", 0)
    with pytest.raises(InvalidHarnessError, match="non-zero weight"):
        spec.with_field("rewards.weights.correctness", 0)
    with pytest.raises(InvalidHarnessError, match="no harness field"):
        spec.get_field("grpo.temperature.x")


def test_diff_lists_changed_leaves() -> None:
    a = HarnessSpec()
    b = a.with_field("grpo.temperature", 1.3).with_field("rewards.weights.format", 0.1)
    assert diff(a, b) == [("grpo.temperature", 1.0, 1.3), ("rewards.weights.format", None, 0.1)]
    assert diff(a, a) == []


def test_training_part_maps_onto_grpo_settings() -> None:
    spec = HarnessSpec().with_field("filters.drop_zero_variance_groups", True).with_field("grpo.beta", 0.04)
    settings_ = spec.to_grpo_settings()
    assert settings_.drop_zero_variance_groups is True and settings_.beta == 0.04
    assert dict(settings_.reward_weights) == {"correctness": 1.0}
    # every GRPOSettings field but the runtime ones comes from the spec
    mapped = set(settings_.to_dict()) - {"use_vllm", "threads"}
    paths = {p.split(".")[-1] for p, _ in leaves(spec.to_json())} | {"reward_weights"}
    assert mapped <= paths


@settings(max_examples=60, deadline=None)
@given(st.floats(0.01, 5), st.integers(1, 512), st.booleans())
def test_any_valid_change_round_trips_through_its_address(temp: float, length: int, drop: bool) -> None:
    spec = (HarnessSpec().with_field("grpo.temperature", temp).with_field("grpo.max_completion_length", length)
            .with_field("filters.drop_zero_variance_groups", drop))  # fmt: skip
    assert HarnessSpec.parse(spec.to_json()).address() == spec.address()
    assert {p for p, _, _ in diff(HarnessSpec(), spec)} <= {
        "grpo.temperature", "grpo.max_completion_length", "filters.drop_zero_variance_groups"}
