"""How a large append is cut into INSERTs: by count (a small first chunk, larger later
ones) and by the bytes of its payloads, lazily, and stored whole however it is cut."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import nullcontext

import pytest

from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, NewEvent
from evotrainer.store import eventstore as es
from evotrainer.store.audit import audit
from evotrainer.store.batch import Prepared, prepare

MAIN = BranchRef("exp", "main")


def sized(n: int, blob: int = 0) -> NewEvent:
    """A TaskRequested whose inputs carry `blob` bytes of text."""
    return NewEvent("TaskRequested", {"task_id": f"t{n}", "kind": "noop", "queue": "control",
                                      "inputs": {"blob": "x" * blob}})  # fmt: skip


def test_chunks_start_small_then_grow() -> None:
    events = [prepare(sized(i)) for i in range(es.CHUNK_EVENTS + 2 * es.LATER_CHUNK_EVENTS + 5)]
    sizes = [len(chunk) for chunk in es.insert_chunks(events)]
    assert sizes == [es.CHUNK_EVENTS, es.LATER_CHUNK_EVENTS, es.LATER_CHUNK_EVENTS, 5]
    assert [p for chunk in es.insert_chunks(events) for p in chunk] == events


def test_a_chunk_ends_before_its_payloads_pass_the_byte_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    events = [prepare(sized(i, blob=250)) for i in range(10)] + [prepare(sized(10, blob=3000)), prepare(sized(11))]
    one = len(events[0].payload_json)
    limit = 3 * one + 10  # three of the small ones fit, four do not; the large one alone does not
    monkeypatch.setattr(es, "CHUNK_BYTES", limit)
    assert len(events[10].payload_json) > limit
    chunks = list(es.insert_chunks(events))
    assert [len(c) for c in chunks] == [3, 3, 3, 1, 1, 1]  # the large event alone, then the rest
    assert all(sum(len(p.payload_json) for p in c) <= limit for c in chunks if len(c) > 1)
    assert [p for chunk in chunks for p in chunk] == events


def test_a_full_chunk_is_handed_out_before_the_next_event_is_drawn() -> None:
    drawn: list[int] = []

    def lazily() -> Iterator[Prepared]:
        for i in range(es.CHUNK_EVENTS + 3):
            drawn.append(i)
            yield prepare(sized(i))

    chunks = es.insert_chunks(lazily())
    assert len(next(chunks)) == es.CHUNK_EVENTS
    assert len(drawn) == es.CHUNK_EVENTS  # the server gets the first chunk while the rest wait
    assert len(next(chunks)) == 3


def test_a_batch_cut_by_bytes_is_stored_whole_in_one_chain(store: EventStore,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setattr(es, "CHUNK_BYTES", 2000)
    store.create_experiment("exp")
    batch = [sized(i, blob=700 if i % 3 else 5000) for i in range(40)]
    stored = store.append(MAIN, batch)
    assert [e.seq for e in stored] == list(range(2, 42))
    assert [e.payload["inputs"]["blob"] for e in store.read_branch(MAIN)[1:]] == [e.payload["inputs"]["blob"] for e in batch]
    report = audit(store)
    assert report.intact, report.problems


@pytest.mark.parametrize("in_callers_transaction", [False, True])
def test_a_few_heavy_events_go_in_chunks_too(store: EventStore, monkeypatch: pytest.MonkeyPatch,
                                             in_callers_transaction: bool) -> None:  # fmt: skip
    """A batch small enough for one statement, whose payloads together pass CHUNK_BYTES,
    is cut like a large one: one statement would carry them all in one jsonb value."""
    monkeypatch.setattr(es, "CHUNK_BYTES", 2000)
    store.create_experiment("exp")
    sent: list[str] = []
    real_execute = store.conn.execute
    monkeypatch.setattr(store.conn, "execute", lambda query, *a, **k: sent.append(str(query)) or real_execute(query, *a, **k))
    batch = [sized(i, blob=900) for i in range(4)]  # about 1 KB each: 4 KB in all, a few under the limit
    with store.transaction() if in_callers_transaction else nullcontext():
        stored = store.append(MAIN, batch)
    assert not any("evotrainer_append(" in q for q in sent)  # not the one-statement path
    assert [e.seq for e in stored] == [2, 3, 4, 5]
    assert [e.payload["inputs"]["blob"] for e in store.read_branch(MAIN)[1:]] == [e.payload["inputs"]["blob"] for e in batch]
    assert audit(store).intact
    store.append(MAIN, [sized(9)])  # a light one still takes one statement
    assert any("evotrainer_append(" in q for q in sent)
