"""The event catalogue: required types, frozen models, exported schemas that cannot drift."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from evotrainer.errors import InvalidPayloadError, UsageError
from evotrainer.events import ExperimentCreated, all_models, event_types, model_for
from evotrainer.events.schemas import _defaults_filler, render, schema_filename, schema_for, validate

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


def test_a_refusal_names_the_offending_field() -> None:
    with pytest.raises(InvalidPayloadError, match=r"data\.task_id: .*shorter than 1"):
        validate("TaskRequested", 2, {"task_id": "", "kind": "noop", "queue": "control"})


def test_valid_payloads_get_the_schema_defaults_they_left_out() -> None:
    payload = {"task_id": "t", "kind": "noop", "queue": "control"}
    validate("TaskRequested", 2, payload)
    # (A default made by a factory, like `inputs`, is not in the schema: the model adds it on read.)
    assert payload == {"task_id": "t", "kind": "noop", "queue": "control", "max_attempts": 3}


def test_defaults_are_filled_at_every_depth_without_sharing_objects() -> None:
    schema = {
        "$defs": {
            "Leaf": {"type": "object", "properties": {"tags": {"type": "array", "default": []},
                                                         "child": {"anyOf": [{"$ref": "#/$defs/Leaf"}, {"type": "null"}]}}},
        },
        "type": "object",
        "properties": {
            "one": {"$ref": "#/$defs/Leaf"},
            "many": {"type": "array", "items": {"$ref": "#/$defs/Leaf"}},
            "named": {"type": "object", "additionalProperties": {"$ref": "#/$defs/Leaf"}},
            "level": {"type": "integer", "default": 1},
        },
    }
    fill = _defaults_filler(schema, schema["$defs"], ())
    assert fill is not None
    value: dict = {"one": {"child": {}}, "many": [{}, {"tags": ["kept"]}], "named": {"a": {}}}
    fill(value)
    assert value == {
        "one": {"tags": [], "child": {}},  # a recursive model fills the level it is reached at
        "many": [{"tags": []}, {"tags": ["kept"]}],
        "named": {"a": {"tags": []}},
        "level": 1,
    }
    assert value["one"]["tags"] is not value["many"][0]["tags"]
    assert _defaults_filler({"type": "object", "properties": {"x": {"type": "string"}}}, {}, ()) is None


@pytest.mark.parametrize("value", [datetime.now(UTC), {1, 2}, object()])
def test_python_values_that_are_not_json_are_refused_cleanly(value: object) -> None:
    with pytest.raises(InvalidPayloadError, match="not JSON"):
        validate("TaskRequested", 2, {"task_id": value, "kind": "noop", "queue": "control"})


def test_the_store_knows_without_the_catalogue_which_payloads_need_upcasting() -> None:
    """Readers skip importing the catalogue for current payloads (evotrainer.store.records):
    its table of types with more than one version must be the catalogue's."""
    from evotrainer.events import latest_version
    from evotrainer.store.records import NEWER_VERSIONS

    assert NEWER_VERSIONS == {t: latest_version(t) for t in event_types() if latest_version(t) > 1}


def test_an_old_payload_read_without_the_catalogue_is_still_upcast() -> None:
    import subprocess
    import sys

    code = ("import sys; from evotrainer.store.records import upcast;"
            " assert 'evotrainer.events.base' not in sys.modules;"
            " assert upcast('TaskRequested', 2, {})[0] == 2 and 'evotrainer.events.base' not in sys.modules;"
            " assert upcast('TaskRequested', 1, {'kind': 'noop'}) == (2, {'kind': 'noop'})")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
