"""Property tests where data is encoded, hashed and read back through jsonb."""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evotrainer.errors import InvalidPayloadError, UsageError
from evotrainer.events import Event, register, upcaster
from evotrainer.events import base as event_registry
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, NewEvent
from evotrainer.store.audit import audit
from evotrainer.store.encoding import encode_payload, event_hash, format_time, hash_pieces

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    # the values jsonb would change, and near misses the fast encoding must not confuse
    | st.sampled_from([-0.0, 0.0, -0.05, 1e16, -1e16, 1.5e300, 9.9e15, 1e-7, 9999999999999998.0])
    | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(config=st.dictionaries(st.text(max_size=8), json_values, max_size=5))
def test_any_json_payload_reads_back_equal_and_audits_intact(store: EventStore, config: dict) -> None:
    try:
        normalized = encode_payload("ExperimentCreated", {"config": config})[0]["config"]
    except InvalidPayloadError as exc:
        assert "NUL" in str(exc)  # the only thing jsonb cannot hold among these values
        return
    name = f"e{uuid.uuid4().hex[:10]}"
    created = store.create_experiment(name, {"config": config})
    read = store.read_branch(BranchRef(name, "main"))[0]
    assert read.payload["config"] == normalized == created.payload["config"]
    assert read.hash == created.hash
    report = audit(store, BranchRef(name, "main"))
    assert report.intact, report.problems


@pytest.mark.parametrize(
    ("value", "problem"),
    [(float("nan"), "JSON cannot hold"), (float("inf"), "JSON cannot hold"), (2**64, "64 bits"),
     ("a\x00b", "NUL"), (object(), "not a JSON value"), ({1: "x"}, "non-string key")],
)
def test_values_jsonb_would_change_are_refused(store: EventStore, value: object, problem: str) -> None:
    with pytest.raises(InvalidPayloadError, match=problem):
        store.create_experiment("e", {"config": {"v": value}})
    assert store.conn.execute("SELECT count(*) FROM events").fetchone()[0] == 0


def test_lone_surrogates_are_refused(store: EventStore) -> None:
    with pytest.raises(InvalidPayloadError):
        store.create_experiment("e", {"config": {"v": "\ud800"}})


def test_old_payload_versions_are_upcast_on_read_and_never_rewritten(store: EventStore) -> None:
    """Register v1 of a type, store it, then evolve the type to v2: reads see v2."""

    class ProbeMeasuredV1(Event):
        event_type = "ProbeMeasured"
        schema_version = 1
        millis: int

    register(ProbeMeasuredV1)
    try:
        store.create_experiment("e")
        main = BranchRef("e", "main")
        stored = store.append(main, [NewEvent("ProbeMeasured", {"millis": 1500})])[0]

        class ProbeMeasured(Event):
            schema_version = 2
            seconds: float

        register(ProbeMeasured)
        upcaster("ProbeMeasured", 1)(lambda p: {"seconds": p["millis"] / 1000})
        read = store.read_branch(main)[-1]
        assert (read.schema_version, read.payload) == (2, {"seconds": 1.5})
        assert read.model() == ProbeMeasured(seconds=1.5)
        raw = store.conn.execute("SELECT schema_version, payload FROM events WHERE seq = 2").fetchone()
        assert raw == (1, {"millis": 1500}) and read.hash == stored.hash
        assert audit(store).intact
    finally:
        for key in [k for k in event_registry._models if k[0] == "ProbeMeasured"]:
            del event_registry._models[key]
        event_registry._latest.pop("ProbeMeasured", None)
        event_registry._upcasters.pop(("ProbeMeasured", 1), None)


tricky_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
    | st.sampled_from([-0.0, 0.0, -0.05, 1e16, -1e16, 1.5e300, 9.9e15, 1e-7]) | st.floats()
    | st.text(alphabet=st.characters(codec="utf-8")) | st.uuids(),
    lambda children: st.lists(children, max_size=3) | st.tuples(children) | st.dictionaries(st.text(max_size=4), children, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(value=tricky_values)
def test_the_fast_encoding_agrees_with_the_full_walk(value: object) -> None:
    """encode_payload settles most payloads without walking them; it must give exactly
    what walking every value gives, or the same refusal."""
    from evotrainer.store.encoding import _normalize, canonical_json

    payload = {"v": value}
    try:
        walked = _normalize(payload, "T", "data")
        expected: object = (walked, canonical_json(walked))
    except InvalidPayloadError:
        expected = InvalidPayloadError
    try:
        got: object = encode_payload("T", payload)
    except InvalidPayloadError:
        got = InvalidPayloadError
    assert got == expected


metadata_text = st.text(min_size=1, max_size=12).filter(lambda text: "\x00" not in text)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(config=st.dictionaries(st.text(max_size=8), json_values, max_size=4), actor=metadata_text,
       key=metadata_text, size=st.integers(1, 3))
def test_hashes_chained_on_the_server_are_the_python_chain(
    store: EventStore, config: dict, actor: str, key: str, size: int
) -> None:
    """Small appends are hashed by migration 0006's function from bytes this process
    encoded; the chain must be exactly the one event_hash() (and so audit) computes."""
    try:
        encode_payload("ExperimentCreated", {"config": config})
    except InvalidPayloadError:
        return
    name = f"e{uuid.uuid4().hex[:10]}"
    store.create_experiment(name)
    events = [NewEvent("ExperimentCreated", {"name": name, "config": config}, idempotency_key=f"{key}{i}",
                       actor=actor, causation_id=str(uuid.uuid4())) for i in range(size)]
    stored = store.append(BranchRef(name, "main"), events)
    for event in [*stored, *store.read_branch(BranchRef(name, "main"))[1:]]:
        assert event.hash == event_hash(
            prev_hash=event.prev_hash, event_id=event.event_id, experiment=event.experiment, branch=event.branch,
            seq=event.seq, event_type=event.type, schema_version=event.schema_version,
            payload_json=encode_payload(event.type, event.payload)[1], causation_id=event.causation_id,
            correlation_id=event.correlation_id, idempotency_key=event.idempotency_key, actor=event.actor,
            recorded_at=format_time(event.recorded_at),
        )
    assert store.read_branch(BranchRef(name, "main"))[1:] == stored
    report = audit(store, BranchRef(name, "main"))
    assert report.intact, report.problems


@pytest.mark.parametrize(("field", "value", "problem"), [
    ("actor", "a\x00b", "NUL"), ("idempotency_key", "k\x00", "NUL"), ("actor", "a\udc00", "surrogate"),
    ("idempotency_key", "\ud800", "surrogate"),
])
def test_metadata_postgres_cannot_hold_is_refused(store: EventStore, field: str, value: str, problem: str) -> None:
    store.create_experiment("meta")
    event = NewEvent("TaskRequested", {"task_id": "t", "kind": "noop", "queue": "control"}, **{field: value})
    with pytest.raises(UsageError, match=problem):
        store.append(BranchRef("meta", "main"), [event])
    assert len(store.read_branch(BranchRef("meta", "main"))) == 1


@given(text=st.text(max_size=12), seq=st.integers(1, 2**62), version=st.integers(1, 99),
       payload=st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=3),
       optional=st.lists(st.none() | st.text(max_size=8), min_size=3, max_size=3))
def test_the_server_hash_pieces_join_into_the_client_hash(
    text: str, seq: int, version: int, payload: dict, optional: list
) -> None:
    """The two encodings of the hashed bytes (one call on the client path; two pieces
    around the previous hash and the seq for migration 0006's function) agree."""
    fields: dict[str, Any] = {
        "event_id": text, "experiment": f"e{text}", "branch": f"b{text}", "event_type": f"T{text}",
        "schema_version": version, "payload_json": orjson.dumps(payload), "causation_id": optional[0],
        "correlation_id": optional[1], "idempotency_key": optional[2], "actor": text or "a",
        "recorded_at": "2026-12-03T07:00:00.000000+00:00",
    }
    prev = "ab" * 32
    before, after = hash_pieces(**fields)
    joined_on_the_server = b'["' + prev.encode() + b'",' + before + str(seq).encode() + after  # migration 0006
    assert hashlib.sha256(joined_on_the_server).hexdigest() == event_hash(prev_hash=prev, seq=seq, **fields)


def test_read_branch_of_some_types_keeps_the_inherited_prefix_and_the_order(store: EventStore) -> None:
    store.create_experiment("typed")
    main = BranchRef("typed", "main")
    note = {"harness_hash": "a" * 64, "spec": {}, "parent_hash": None, "changed_fields": []}

    def task(task_id: str) -> dict[str, Any]:
        return {"task_id": task_id, "kind": "noop", "queue": "control", "inputs": {}}
    store.append(main, [NewEvent("HarnessVersioned", note), NewEvent("TaskRequested", task("t1"))])
    store.fork(main, "child")
    child = BranchRef("typed", "child")
    store.append(child, [NewEvent("TaskRequested", task("t2")), NewEvent("HarnessVersioned", note)])
    everything = store.read_branch(child)
    picked = store.read_branch(child, types=["TaskRequested"])
    assert picked == [e for e in everything if e.type == "TaskRequested"] and len(picked) == 2
    assert [e.seq for e in store.read_branch(child, upto_seq=picked[0].seq, types=("TaskRequested",))] == [
        picked[0].seq]
    assert store.read_branch(child, types=[]) == []
    second = store.read_branch(child, types=["TaskRequested"], payload_contains={"task_id": "t2"})
    assert [e.payload["task_id"] for e in second] == ["t2"]
    assert store.read_branch(child, payload_contains={"kind": "noop"}) == picked
