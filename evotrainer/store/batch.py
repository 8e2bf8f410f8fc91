"""An append's events on their way in: each validated and encoded once, the ids and rows
made for them, and what the server's replies turn back into stored events.

EventStore (eventstore.py) decides how a batch travels (one statement, or pipelined
chunks); this module holds what it sends and what it makes of the answers.
"""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import TYPE_CHECKING, Any, NamedTuple

import psycopg

from evotrainer.errors import ConcurrencyError, UsageError
from evotrainer.store.encoding import encode_payload
from evotrainer.store.records import NewEvent, StoredEvent, row_to_event

if TYPE_CHECKING:
    from evotrainer.store.eventstore import BranchInfo


class Prepared(NamedTuple):
    """An event validated and encoded once (a tuple: this is built for every event)."""

    new: NewEvent
    version: int
    payload: dict[str, Any]
    """As it will read back from jsonb (see encoding.encode_payload)."""
    payload_json: bytes


class Batch:
    """The events of one append, each prepared once, when it is first needed (a retry
    after a lost race reuses the work)."""

    def __init__(self, events: Sequence[NewEvent]) -> None:
        self.events = events
        self._prepared: list[Prepared | None] = [None] * len(events)

    def prepared(self, index: int) -> Prepared:
        done = self._prepared[index]
        if done is None:
            done = self._prepared[index] = prepare(self.events[index])
        return done

    def payload_bytes(self) -> int:
        """The canonical JSON of every payload, in bytes (prepares them all)."""
        return sum(len(self.prepared(i).payload_json) for i in range(len(self.events)))


@cache
def _catalogue() -> tuple[Callable[[str], int], Callable[[str, int, Any], None]]:
    """The event catalogue's latest versions and validators. Its models and compiled
    schemas take longer to import than a reading command takes to run, so they are
    imported by the first append, not with the store."""
    from evotrainer.events import latest_version
    from evotrainer.events.schemas import validate

    return latest_version, validate


def prepare(new: NewEvent) -> Prepared:
    """Validate against the type's JSON Schema and fix the canonical bytes to be hashed."""
    latest_version, validate = _catalogue()
    version = latest_version(new.type)
    validate(new.type, version, new.payload)  # also fills in the schema's defaults
    payload, payload_json = encode_payload(new.type, new.payload)
    if new.idempotency_key is not None:
        if not new.idempotency_key:
            raise UsageError("an idempotency key must not be empty")
        check_text("idempotency key", new.idempotency_key)
    if new.actor is not None:
        check_text("actor", new.actor)
    if new.causation_id is not None or new.correlation_id is not None:
        # Postgres keeps a UUID in its canonical form, and that form is what gets hashed.
        causation = canonical_uuid("causation_id", new.causation_id)
        correlation = canonical_uuid("correlation_id", new.correlation_id)
        if (causation, correlation) != (new.causation_id, new.correlation_id):
            new = dataclasses.replace(new, causation_id=causation, correlation_id=correlation)
    return Prepared(new, version, payload, payload_json)


def check_text(name: str, value: str) -> None:
    """Postgres text holds neither NUL nor lone surrogates (which are not UTF-8)."""
    if "\x00" in value:
        raise UsageError(f"the {name} contains a NUL character")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise UsageError(f"the {name} is not valid Unicode (a lone surrogate)") from None


def canonical_uuid(name: str, value: Any) -> str | None:
    if value is None:
        return None
    try:
        return str(uuid.UUID(value))
    except (ValueError, TypeError, AttributeError):
        raise UsageError(f"{name} must be a UUID, not {value!r}") from None


class BranchGone(Exception):
    """No branch row where a cached branch said: it was created in a transaction that
    rolled back. Nothing was written, and the transaction can go on."""


@dataclass
class SentInsert:
    """INSERTs whose results (positions, transaction id) are read only once the append's
    transaction is over: in pipeline mode, reading them earlier would cost a round trip."""

    info: BranchInfo
    recorded_at: datetime
    lock: psycopg.Cursor[Any]
    """sql.LOCK_BRANCH's cursor: the transaction id."""
    chunks: list[tuple[list[Prepared], list[tuple[Any, ...]], psycopg.Cursor[Any]]] = field(default_factory=list)
    """Per INSERT: its events, their rows (in sql.INSERT_ROWS' order) and its cursor."""

    def stored(self) -> list[StoredEvent]:
        """The events as stored."""
        info = self.info
        txid = int(self.lock.fetchone()[0])  # type: ignore[index]
        out: list[StoredEvent] = []
        for chunk, rows, cursor in self.chunks:
            placed = dict(cursor.fetchall())
            out.extend(
                StoredEvent(
                    placed[seq], txid, event_id, info.experiment, info.name, seq, p.new.type, p.version,
                    p.payload, p.new.causation_id, p.new.correlation_id, p.new.idempotency_key, actor,
                    self.recorded_at, prev_hash, hash_,
                )
                for (event_id, seq, *_, actor, prev_hash, hash_), p in zip(rows, chunk, strict=True)
            )
        return out


class ServerAppend(NamedTuple):
    """An append sent as one statement (migration 0006): its arguments, and what is needed
    to turn the rows it returns into stored events."""

    info: BranchInfo
    batch: Batch
    recorded_at: datetime
    ids_and_actors: list[tuple[str, str]]
    params: dict[str, Any]

    def stored(self, rows: list[tuple[Any, ...]], expected_seq: int | None) -> list[StoredEvent]:
        """One event per row, in batch order; ConcurrencyError or BranchGone when the
        function wrote nothing because of either."""
        info = self.info
        out: list[StoredEvent | None] = [None] * len(self.batch.events)
        for row in rows:
            outcome, index = row[0], row[1]
            if outcome == "gone":
                raise BranchGone()
            if outcome == "conflict":
                raise ConcurrencyError(str(info.ref), -1 if expected_seq is None else expected_seq, row[7])
            if outcome == "existing":
                out[index] = row_to_event(row[2:])
                continue
            p = self.batch.prepared(index)
            new = p.new
            event_id, actor = self.ids_and_actors[index]
            out[index] = StoredEvent(
                row[2], int(row[3]), event_id, info.experiment, info.name, row[7], new.type, p.version, p.payload,
                new.causation_id, new.correlation_id, new.idempotency_key, actor, self.recorded_at, row[16], row[17],
            )
        if any(event is None for event in out):
            raise RuntimeError("evotrainer_append() returned no row for some events")
        return out  # type: ignore[return-value]


def already_json(data: bytes) -> bytes:
    """The batch is serialised by orjson already: hand psycopg the bytes as they are."""
    return data


_VARIANT_DIGIT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}


def new_event_ids(count: int) -> list[str]:
    """Time-ordered (version 7, RFC 9562) UUIDs in text form: 48 bits of Unix time in
    milliseconds, then 74 random bits. Event ids are a unique index: ids that grow with
    time land at its right edge, where Postgres inserts cheaply and touches few pages,
    where random ones would spread every insert over the whole index as it grows. Made in
    bulk from one read of the system's randomness: uuid.uuid4() per event costs more
    than hashing it."""
    head = f"{time.time_ns() // 1_000_000:012x}"
    prefix = f"{head[:8]}-{head[8:]}-7"
    digits = os.urandom(10 * count).hex()
    return [
        f"{prefix}{digits[i:i + 3]}-{_VARIANT_DIGIT[digits[i + 3]]}{digits[i + 4:i + 7]}-{digits[i + 7:i + 19]}"
        for i in range(0, 20 * count, 20)
    ]


def distinct_keys(events: Sequence[NewEvent]) -> list[str]:
    """The batch's idempotency keys; UsageError when one repeats (the second event would
    silently come back as the first)."""
    keys = [e.idempotency_key for e in events if e.idempotency_key is not None]
    if len(keys) != len(set(keys)):
        raise UsageError("a batch repeats an idempotency key")
    return keys
