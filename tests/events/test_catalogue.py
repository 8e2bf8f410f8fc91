"""The event catalogue: required types, frozen models, exported schemas that cannot drift."""

from __future__ import annotations

import json
from pathlib import Path

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from evotrainer.errors import InvalidPayloadError, UsageError
from evotrainer.events import ExperimentCreated, all_models, event_types, model_for
from evotrainer.events.schemas import render, schema_filename, schema_for, validate

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
REQUIRED = {
    "ExperimentCreated", "BranchForked", "HarnessVersioned", "PolicyCheckpointed", "RolloutsRecorded",
    "TrainingCompleted", "EvaluationRecorded", "DiagnosisRecorded", "DiagnosticRevised", "InterventionProposed",
    "BacktestCompleted", "PromotionDecided", "SkillRecorded", "TaskRequested", "TaskCompleted", "TaskFailed",
}


def catalogue_models() -> list[type]:
    return [m for m in all_models() if m.__module__.startswith("evotrainer.events.")]


def test_every_required_type_is_registered() -> None:
    assert REQUIRED <= set(event_types())


def test_schema_files_match_the_models() -> None:
    expected = {schema_filename(m): render(schema_for(m)) for m in catalogue_models()}
    on_disk = {p.name: p.read_text(encoding="utf-8") for p in SCHEMAS.glob("*.json")}
    drifted = sorted(name for name in expected if on_disk.get(name) != expected[name])
    stale = sorted(set(on_disk) - set(expected))
    assert not drifted and not stale, f"run `make schemas`: drifted {drifted}, stale {stale}"


def test_payload_models_are_frozen() -> None:
    created = ExperimentCreated(name="x")
    with pytest.raises(pydantic.ValidationError):
        created.name = "y"  # type: ignore[misc]


def test_unknown_types_and_versions_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="unknown event type"):
        model_for("NoSuchThingHappened")
    with pytest.raises(UsageError, match="no schema version 9"):
        model_for("ExperimentCreated", 9)


@pytest.mark.parametrize(
    "payload",
    [
        {},
        {"name": ""},
        {"name": 3},
        {"name": "x", "surprise": True},
        {"name": "x", "domain": "biology"},
        {"name": "x", "config": []},
        {"name": "x" * 101},
        [],
        "text",
        None,
    ],
)
def test_invalid_payloads_are_refused_with_a_reason(payload: object) -> None:
    with pytest.raises(InvalidPayloadError, match="invalid ExperimentCreated payload: "):
        validate("ExperimentCreated", 1, payload)


@given(st.dictionaries(st.text(max_size=5), st.none() | st.integers() | st.text(max_size=5), max_size=4))
def test_the_validator_agrees_with_pydantic(payload: dict) -> None:
    """The compiled JSON Schema and the model accept and refuse the same payloads."""
    try:
        ExperimentCreated.model_validate(payload, strict=True)
        model_ok = True
    except pydantic.ValidationError:
        model_ok = False
    try:
        validate("ExperimentCreated", 1, payload)
        schema_ok = True
    except InvalidPayloadError:
        schema_ok = False
    assert model_ok == schema_ok, json.dumps(payload)
