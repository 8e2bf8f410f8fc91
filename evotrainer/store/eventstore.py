"""The Postgres event store: append with optimistic concurrency and idempotency, read by
branch (inherited prefix included) or by global position, create experiments and forks.

    store = EventStore.connect()            # EVOTRAINER_DATABASE_URL or the embedded server
    store.create_experiment("demo", {"domain": "math"})
    store.append(BranchRef("demo", "main"), [NewEvent("TaskRequested", {...})], expected_seq=1)

Guarantees the database enforces rather than this module: immutability (triggers and
grants), one winner per (branch, seq) and per (branch, idempotency key) (unique indexes).
This module adds validation, canonical encoding and the hash chain before anything is
written, and never holds a lock that spans branches.
"""

from __future__ import annotations

import getpass
import os
import socket
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
import psycopg
from psycopg import errors as pg_errors
from psycopg.types.json import Jsonb, set_json_loads

from evotrainer.errors import (
    AlreadyExistsError,
    BypassingWriterError,
    ConcurrencyError,
    DatabaseUnavailableError,
    NotFoundError,
    UsageError,
)
from evotrainer.refs import BranchRef, check_name
from evotrainer.store import sql
from evotrainer.store.batch import (
    Batch,
    BranchGone,
    Prepared,
    SentInsert,
    ServerAppend,
    already_json,
    distinct_keys,
    new_event_ids,
    prepare,
)
from evotrainer.store.encoding import GENESIS_HASH, event_hash, format_time, hash_pieces
from evotrainer.store.records import GlobalPosition, NewEvent, StoredEvent, row_to_event

MAX_APPEND_ATTEMPTS = 20


def default_actor() -> str:
    return os.environ.get("EVOTRAINER_ACTOR") or f"{getpass.getuser()}@{socket.gethostname()}"


@dataclass(frozen=True)
class BranchInfo:
    """A resolved branch. Branch rows never change, so this is safe to cache."""

    branch_id: int
    experiment: str
    name: str
    parent_id: int | None
    fork_seq: int
    fork_hash: str
    segments: tuple[tuple[int, int, int | None], ...]
    """(branch_id, after_seq, upto_seq) pieces of the effective history, nearest first."""
    parent: BranchRef | None = None

    @property
    def ref(self) -> BranchRef:
        return BranchRef(self.experiment, self.name)


CHUNK_EVENTS = 16
"""A batch of up to this many events is one statement (sql.APPEND_CALL). A larger batch
goes out as several INSERTs pipelined in one transaction, this many in the first, and
each event is validated, encoded and hashed just before its chunk is sent: the server
inserts one chunk while this process prepares the next, so the two halves of an append
run on two cores at once instead of taking turns. A small first chunk starts the server
soon."""
LATER_CHUNK_EVENTS = 48
"""Events per INSERT after the first. Every statement costs both processes a wake-up and
psycopg's work on each side of it, whatever its size: a batch of 100 in chunks of 16 took
7 INSERTs, 16 then 48 takes 3. In paired rounds of bench/append.py on the same hour (AMD,
12-05), keyed appends by four writers went from 1.26x to 1.39x one writer's, and one
writer's keyed and unkeyed ratios to raw executemany from 1.08 and 0.99 to 1.24 and 1.14:
the overlap a small chunk buys is needed only to get the server started."""
CHUNK_BYTES = 32 * 1024 * 1024
"""A chunk also ends before its payloads' JSON passes this many bytes (an event larger
alone goes in a chunk of its own): a chunk travels as one jsonb value, which Postgres caps
at 255 MB, and is held whole in this process's memory as it is sent. A batch of up to
CHUNK_EVENTS events that passes it is sent in chunks too, not as one statement."""


def insert_chunks(prepared: Iterable[Prepared]) -> Iterator[list[Prepared]]:
    """`prepared` cut into chunks for INSERTs: CHUNK_EVENTS events in the first,
    LATER_CHUNK_EVENTS in each later one, none past CHUNK_BYTES of payload (see those).
    Lazy: a chunk is handed out as soon as it is full, before the next event is drawn
    (validated and encoded), unless it is the next event's size that ends it."""
    chunk: list[Prepared] = []
    size, held = CHUNK_EVENTS, 0
    for p in prepared:
        if chunk and held + len(p.payload_json) > CHUNK_BYTES:
            yield chunk
            chunk, size, held = [], LATER_CHUNK_EVENTS, 0
        chunk.append(p)
        held += len(p.payload_json)
        if len(chunk) == size:
            yield chunk
            chunk, size, held = [], LATER_CHUNK_EVENTS, 0
    if chunk:
        yield chunk


class EventStore:
    """One connection's view of the event store. Not thread-safe: one store per thread."""

    def __init__(self, conn: psycopg.Connection[Any], actor: str | None = None) -> None:
        self.conn = conn
        self.actor = actor or default_actor()
        self._branches: dict[tuple[str, str], BranchInfo] = {}
        # Committed heads this connection wrote, by branch id. Events never change, so a
        # remembered (seq, hash) stays true; if another writer has moved past it, our
        # insert collides on (branch, seq) and we re-read. Saves a round trip per append.
        # Only heads of appends in the store's own transactions, which have committed
        # when they return (a head past the table would leave a gap in seqs and chain).
        self._heads: dict[int, tuple[int, str]] = {}
        set_json_loads(orjson.loads, conn)

    @classmethod
    def connect(cls, url: str | None = None, actor: str | None = None) -> EventStore:
        """Open the store at `url`, or at the configured/embedded database (migrated on first use)."""
        from evotrainer.store.database import ensure_database

        url = url or ensure_database()
        try:
            conn = psycopg.connect(url, autocommit=True)
        except psycopg.OperationalError as exc:
            raise DatabaseUnavailableError(f"cannot connect to the event store: {_first_line(exc)}") from None
        return cls(conn, actor)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> EventStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """A transaction (or a savepoint inside one) on the store's connection."""
        with self.conn.transaction():
            yield self.conn

    # -- branches ---------------------------------------------------------------

    def branch(self, ref: BranchRef) -> BranchInfo:
        """Resolve EXPERIMENT/BRANCH, or NotFoundError."""
        key = (ref.experiment, ref.branch)
        info = self._branches.get(key)
        if info is None:
            with self._own_reads():
                info = self._resolve(ref)
            self._branches[key] = info
        return info

    def _own_reads(self) -> AbstractContextManager[Any]:
        """Around the store's own lookups: on a connection without autocommit that is idle,
        a transaction that ends with them. Otherwise psycopg opens one that stays open, and
        the append that looked the branch up would take it for the caller's and leave it
        uncommitted (while the next, with the branch known, commits its own)."""
        if self.conn.autocommit or self.in_transaction():
            return nullcontext()
        return self.conn.transaction()

    def _forget(self, ref: BranchRef) -> None:
        info = self._branches.pop((ref.experiment, ref.branch), None)
        if info is not None:
            self._heads.pop(info.branch_id, None)

    def _resolve(self, ref: BranchRef) -> BranchInfo:
        chain = self.conn.execute(sql.ANCESTRY, (ref.experiment, ref.branch)).fetchall()
        if not chain:
            raise NotFoundError(f"no branch {ref.experiment}/{ref.branch}")
        segments: list[tuple[int, int, int | None]] = []
        upto: int | None = None
        for branch_id, _exp, _name, _parent, fork_seq in chain:
            segments.append((branch_id, fork_seq, upto))
            # An ancestor contributes only what every branch below it inherited.
            upto = fork_seq if upto is None else min(upto, fork_seq)
        branch_id, experiment, name, parent_id, fork_seq = chain[0]
        fork_hash, parent = GENESIS_HASH, None
        if parent_id is not None:
            parent = BranchRef(chain[1][1], chain[1][2])
            fork_hash = self._hash_at(tuple(segments[1:]), fork_seq)
        return BranchInfo(branch_id, experiment, name, parent_id, fork_seq, fork_hash, tuple(segments), parent)

    def _hash_at(self, segments: tuple[tuple[int, int, int | None], ...], seq: int) -> str:
        for branch_id, after, upto in segments:
            if seq > after and (upto is None or seq <= upto):
                row = self.conn.execute(
                    "SELECT hash FROM events WHERE branch_id = %s AND seq = %s", (branch_id, seq)
                ).fetchone()
                if row:
                    return str(row[0])
        raise NotFoundError(f"no event at seq {seq}")

    def head(self, ref: BranchRef) -> tuple[int, str]:
        """The branch's last seq and hash (its fork point when it has no events of its own)."""
        info = self.branch(ref)
        with self._own_reads():
            row = self.conn.execute(sql.HEAD, (info.branch_id,)).fetchone()
        return (row[0], row[1]) if row else (info.fork_seq, info.fork_hash)

    def branches(self, experiment: str | None = None) -> list[BranchInfo]:
        """Every branch (of one experiment), oldest first."""
        rows = self.conn.execute(
            "SELECT experiment, name FROM branches WHERE %s::text IS NULL OR experiment = %s ORDER BY branch_id",
            (experiment, experiment),
        ).fetchall()
        return [self.branch(BranchRef(exp, name)) for exp, name in rows]

    def create_experiment(self, name: str, payload: dict[str, Any] | None = None) -> StoredEvent:
        """Create NAME/main whose first event is ExperimentCreated."""
        check_name("experiment", name)
        prepared = prepare(NewEvent("ExperimentCreated", {"name": name, **(payload or {})}))
        try:
            with self.conn.transaction():
                branch_id = self.conn.execute(
                    "INSERT INTO branches (experiment, name) VALUES (%s, 'main') RETURNING branch_id", (name,)
                ).fetchone()[0]  # type: ignore[index]
                info = BranchInfo(branch_id, name, "main", None, 0, GENESIS_HASH, ((branch_id, 0, None),))
                return self._insert(info, [prepared], 0, GENESIS_HASH).stored()[0]
        except pg_errors.UniqueViolation:
            raise AlreadyExistsError(f"experiment {name} already exists") from None

    def fork(self, source: BranchRef, new_branch: str, reason: str = "") -> StoredEvent:
        """Start NEW_BRANCH from `source` at its seq (its head when no seq is given).

        The new branch shares the parent's first SEQ events; its own first event is
        BranchForked, chained to the parent's event at SEQ.
        """
        check_name("branch", new_branch)
        parent = self.branch(source.branch_ref)
        head_seq, _ = self.head(source.branch_ref)
        seq = head_seq if source.seq is None else source.seq
        if seq > head_seq:
            raise UsageError(f"{source} is past the head of {source.branch_ref} (seq {head_seq})")
        with self._own_reads():
            fork_hash = self._hash_at(parent.segments, seq)
        payload = {"parent": str(source.branch_ref), "fork_seq": seq, "fork_hash": fork_hash, "reason": reason}
        prepared = prepare(NewEvent("BranchForked", payload))
        try:
            with self.conn.transaction():
                branch_id = self.conn.execute(
                    "INSERT INTO branches (experiment, name, parent_id, fork_seq) VALUES (%s, %s, %s, %s)"
                    " RETURNING branch_id",
                    (source.experiment, new_branch, parent.branch_id, seq),
                ).fetchone()[0]  # type: ignore[index]
                segments = ((branch_id, seq, None), *_clip(parent.segments, seq))
                info = BranchInfo(branch_id, source.experiment, new_branch, parent.branch_id, seq, fork_hash,
                                  segments, source.branch_ref)
                return self._insert(info, [prepared], seq, fork_hash).stored()[0]
        except pg_errors.UniqueViolation:
            raise AlreadyExistsError(f"branch {source.experiment}/{new_branch} already exists") from None

    # -- appending --------------------------------------------------------------

    def append(
        self, ref: BranchRef, events: Sequence[NewEvent], expected_seq: int | None = None
    ) -> list[StoredEvent]:
        """Append events atomically to a branch and return them as stored.

        `expected_seq` is the branch head the caller last saw; if another writer moved
        it, ConcurrencyError is raised and nothing is written. Events whose idempotency
        key is already in the branch are not written again: the originals come back.
        """
        if not events:
            return []
        keys = distinct_keys(events)
        batch = Batch(events)
        # A few events whose payloads are large go in chunks too: one statement's events
        # travel as one jsonb value, which Postgres caps (CHUNK_BYTES).
        if len(events) <= CHUNK_EVENTS and batch.payload_bytes() <= CHUNK_BYTES:
            appended = self._append_through(ref, batch, sql.APPEND_CALL, {"expected_seq": expected_seq})
            assert appended is not None  # evotrainer_append() returns a row per event
            return appended
        return self._append_pipelined(ref, batch, keys, expected_seq)

    def in_transaction(self) -> bool:
        """Whether the connection is inside a transaction (a caller's: the store's own
        last only as long as one of its calls). Only a transaction the store owns is known
        to commit; inside a caller's it may roll back, and an error aborts it."""
        return self.conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE

    @contextmanager
    def _pipelined_transaction(self) -> Iterator[None]:
        """A transaction of pipelined statements that travels in one round trip.

        psycopg's transaction() in pipeline mode waits for BEGIN's reply, and for
        COMMIT's before the pipeline's end: two more round trips, which on a machine where
        each one wakes the server process cost more than a 16-event chunk. On an
        autocommit connection (the store's own) BEGIN and COMMIT are queued like the
        other statements instead. An error on the server skips everything after it, an
        error here leaves the queued statements uncommitted; either way the transaction is
        rolled back before the error goes on."""
        conn = self.conn
        if not conn.autocommit:
            with conn.pipeline(), conn.transaction():
                yield
            return
        failure: Exception | None = None
        committed = False
        try:
            try:
                with conn.pipeline():
                    conn.execute("BEGIN", prepare=False)
                    try:
                        yield
                        conn.execute("COMMIT", prepare=False)
                    except Exception as exc:
                        # The server's error, read while a later statement was queued, or
                        # one raised here (a bad event prepared between chunks). Held until
                        # the pipeline is left: leaving it reports what the server skipped
                        # (and psycopg logs a warning for that when an error is on its way
                        # out); the first failure is what counts.
                        failure = exc
            except psycopg.Error:
                if failure is None:
                    raise
            if failure is not None:
                raise failure
            committed = True
        finally:
            if not committed:
                self._roll_back()

    def _roll_back(self) -> None:
        """End a failed transaction of the store's own; if that fails too, close the
        connection rather than leave a transaction open on it (and a branch locked)."""
        conn = self.conn
        if conn.closed or not self.in_transaction():
            return  # the server rolled back already (a failed COMMIT), or the connection is gone
        if conn.pgconn.pipeline_status != psycopg.pq.PipelineStatus.OFF:
            conn.close()  # libpq never left pipeline mode: no reply would come
            return
        try:
            conn.execute("ROLLBACK", prepare=False)
        except psycopg.Error:
            conn.close()

    def _resolve_again(self, ref: BranchRef, owns_transaction: bool, aborted: bool = False) -> BranchInfo:
        """After a cached branch turned out not to exist (created in a transaction that
        rolled back): look it up afresh, NotFoundError when it is gone for good. When the
        discovery was an error (`aborted`), a caller's transaction is aborted now and the
        branch cannot be looked up in it."""
        self._forget(ref.branch_ref)
        if aborted and not owns_transaction:
            raise NotFoundError(f"no branch {ref.branch_ref}")
        return self.branch(ref.branch_ref)

    def append_through(
        self, ref: BranchRef, events: Sequence[NewEvent], statement: str, params: Mapping[str, Any]
    ) -> list[StoredEvent] | None:
        """Append a batch in one statement, and return the events as stored (append()
        sends batches of up to CHUNK_EVENTS this way, through sql.APPEND_CALL).

        `statement` passes the append's arguments (%(branch)s, %(fork_seq)s,
        %(fork_hash)s, %(recorded_at)s, %(events)s, see sql.APPEND_CALL) to migration
        0006's evotrainer_append(), or to a function of its own that does other work in
        the same transaction and then appends through it (evotrainer_fleet_close()). It
        returns that function's rows; no rows at all means the statement decided not to
        append, and comes back as None. `params` holds the statement's other parameters.
        """
        distinct_keys(events)
        return self._append_through(ref, Batch(events), statement, params)

    def _append_through(
        self, ref: BranchRef, batch: Batch, statement: str, params: Mapping[str, Any]
    ) -> list[StoredEvent] | None:
        owns_transaction = not self.in_transaction()
        for index in range(len(batch.events)):  # a bad event is refused before any statement
            batch.prepared(index)
        info = self.branch(ref.branch_ref)
        for _ in range(MAX_APPEND_ATTEMPTS):
            call = self._server_append(info, batch)
            try:
                # One statement in autocommit is a transaction of its own.
                with self.conn.transaction() if owns_transaction and not self.conn.autocommit else nullcontext():
                    rows = self.conn.execute(statement, {**params, **call.params}).fetchall()
                if not rows:
                    return None
                stored = call.stored(rows, params.get("expected_seq"))
            except BranchGone:
                info = self._resolve_again(ref, owns_transaction)
                continue
            except pg_errors.UniqueViolation as exc:
                # Appends queue on the branch's lock and read the head under it, so only a
                # writer that bypasses the store gets here. In our own transaction the next
                # try reads the head it wrote (and the concurrency check sees it).
                if not owns_transaction:
                    raise BypassingWriterError(str(ref.branch_ref), exc.diag.constraint_name or "?") from None
                continue
            except psycopg.Error as exc:
                if exc.sqlstate != sql.BRANCH_GONE_SQLSTATE:
                    raise
                # Raised by a statement that had work of its own to undo.
                info = self._resolve_again(ref, owns_transaction, aborted=True)
                continue
            inserted = [row[1] for row in rows if row[0] == "inserted"]
            if inserted:
                last = stored[max(inserted)]
                if owns_transaction:
                    self._heads[info.branch_id] = (last.seq, last.hash)
                else:
                    self._heads.pop(info.branch_id, None)
            return stored
        expected = params.get("expected_seq")
        raise ConcurrencyError(str(ref.branch_ref), -1 if expected is None else expected, self.head(ref.branch_ref)[0])

    def _server_append(self, info: BranchInfo, batch: Batch) -> ServerAppend:
        """The arguments of evotrainer_append() for a prepared batch."""
        recorded_at = datetime.now(UTC)
        recorded_text = format_time(recorded_at)
        items = []
        actors = []
        for index, event_id in enumerate(new_event_ids(len(batch.events))):
            p = batch.prepared(index)
            new = p.new
            actor = new.actor or self.actor
            before, after = hash_pieces(
                event_id=event_id, experiment=info.experiment, branch=info.name, event_type=new.type,
                schema_version=p.version, payload_json=p.payload_json, causation_id=new.causation_id,
                correlation_id=new.correlation_id, idempotency_key=new.idempotency_key, actor=actor,
                recorded_at=recorded_text,
            )
            items.append({
                "idx": index, "event_id": event_id, "type": new.type, "schema_version": p.version,
                "causation_id": new.causation_id, "correlation_id": new.correlation_id,
                "idempotency_key": new.idempotency_key, "actor": actor, "before": before.decode(),
                "after": after.decode(),
            })
            actors.append((event_id, actor))
        params = {
            "branch": info.branch_id, "fork_seq": info.fork_seq, "fork_hash": info.fork_hash,
            "recorded_at": recorded_at, "events": Jsonb(orjson.dumps(items), dumps=already_json),
        }
        return ServerAppend(info, batch, recorded_at, actors, params)

    def _append_pipelined(
        self, ref: BranchRef, batch: Batch, keys: list[str], expected_seq: int | None
    ) -> list[StoredEvent]:
        """A batch of several chunks: its INSERTs travel without waiting on each other,
        and the server inserts a chunk while the next is prepared."""
        events = batch.events
        owns_transaction = not self.in_transaction()
        # Inside a caller's transaction every event is checked before any statement:
        # there is no savepoint to undo chunks already sent.
        for index in range(len(events) if not owns_transaction else min(len(events), CHUNK_EVENTS)):
            batch.prepared(index)
        info = self.branch(ref.branch_ref)
        for _ in range(MAX_APPEND_ATTEMPTS):
            try:
                with self._pipelined_transaction() if owns_transaction else self.conn.pipeline():
                    existing, fresh, insert = self._append_in_transaction(
                        info, batch, keys, expected_seq, owns_transaction)
                inserted = insert.stored() if insert is not None else []
            except BranchGone:
                info = self._resolve_again(ref, owns_transaction)
                continue
            except pg_errors.UniqueViolation as exc:
                self._heads.pop(info.branch_id, None)
                if not owns_transaction:
                    # Writers queue on the branch's lock and read the head under it, so
                    # only a writer that bypasses the store gets here.
                    raise BypassingWriterError(str(ref.branch_ref), exc.diag.constraint_name or "?") from None
                # A key of the batch was taken (it was not looked up first, see
                # _append_in_transaction), the head cached from our last append was stale,
                # or a writer that bypasses the store took the seq. The retry reads the
                # head and the keys under the lock: taken keys bring back their originals.
                # A seq taken with an expected seq is the caller's conflict to resolve.
                if expected_seq is not None and not _is_key_conflict(exc):
                    actual, _ = self.head(ref.branch_ref)
                    if actual != expected_seq:
                        raise ConcurrencyError(str(ref.branch_ref), expected_seq, actual) from None
                continue
            except psycopg.Error as exc:
                if exc.sqlstate != sql.BRANCH_GONE_SQLSTATE:
                    raise
                # LOCK_BRANCH found no branch row behind a trusted cached head.
                info = self._resolve_again(ref, owns_transaction, aborted=True)
                continue
            if inserted and owns_transaction:
                self._heads[info.branch_id] = (inserted[-1].seq, inserted[-1].hash)
            elif inserted:
                self._heads.pop(info.branch_id, None)
            by_index = dict(zip(fresh, inserted, strict=True))
            return [
                by_index[i] if i in by_index else existing[e.idempotency_key]  # type: ignore[index]
                for i, e in enumerate(events)
            ]
        raise ConcurrencyError(str(ref.branch_ref), expected_seq or -1, self.head(ref.branch_ref)[0])

    def _append_in_transaction(
        self, info: BranchInfo, batch: Batch, keys: list[str], expected_seq: int | None, owns_transaction: bool
    ) -> tuple[dict[str, StoredEvent], list[int], SentInsert | None]:
        """The events already in the branch by key, the indexes of the fresh ones, and
        their INSERTs (sent, results not read yet)."""
        events = batch.events
        # A head we committed ourselves is worth trusting in our own transaction (a stale
        # one costs a retry); inside a caller's there is no retry, so it is always read.
        cached = self._heads.get(info.branch_id) if owns_transaction else None
        if cached is not None and expected_seq is not None and cached[0] != expected_seq:
            cached = None
        existing: dict[str, StoredEvent] = {}
        head: tuple[int, str] | None = cached
        found: list[tuple[Any, ...]] = []
        if cached is None:
            rows = self.conn.execute(sql.LOCK_HEAD_AND_KEYS, {"branch": info.branch_id, "keys": keys}).fetchall()
            if not rows:
                raise BranchGone()
            if rows[0][0] is not None:
                head = (rows[0][0], rows[0][1])
            found = [row[2:] for row in rows if row[2] is not None] if keys else []
        # With a trusted head the keys are not looked up first: waiting for that answer
        # would hold the INSERTs back a round trip, and nearly every key is new. The key's
        # unique index checks each row as it goes in; a taken key fails the transaction
        # (UniqueViolation), and the retry reads the head and the keys under the lock.
        for row in found:
            event = row_to_event(row)
            existing[event.idempotency_key] = event  # type: ignore[index]
        fresh = [i for i, e in enumerate(events) if e.idempotency_key not in existing]
        for i, e in enumerate(events):
            if e.idempotency_key in existing:
                batch.prepared(i)  # validated like the rest, though the original comes back
        if not fresh:
            return existing, fresh, None
        head_seq, head_hash = head if head is not None else (info.fork_seq, info.fork_hash)
        if expected_seq is not None and head_seq != expected_seq:
            raise ConcurrencyError(str(info.ref), expected_seq, head_seq)
        return existing, fresh, self._insert(info, (batch.prepared(i) for i in fresh), head_seq, head_hash)

    def _insert(
        self, info: BranchInfo, prepared: Iterable[Prepared], head_seq: int, head_hash: str
    ) -> SentInsert:
        """Chain and send INSERTs of events after (head_seq, head_hash), in the chunks of
        `insert_chunks`; the caller reads what was stored with `.stored()`.

        `prepared` may be lazy: each chunk is drawn from it only after the previous chunk
        was sent, which is what lets the server work while the events are prepared.
        """
        lock = self.conn.cursor().execute(sql.LOCK_BRANCH, (info.branch_id,))
        sent = SentInsert(info, datetime.now(UTC), lock)
        recorded_text = format_time(sent.recorded_at)
        prev, seq = head_hash, head_seq
        for chunk in insert_chunks(prepared):
            rows: list[tuple[Any, ...]] = []
            for p, event_id in zip(chunk, new_event_ids(len(chunk)), strict=True):
                new = p.new
                actor = new.actor or self.actor
                seq += 1
                digest = event_hash(
                    prev_hash=prev, event_id=event_id, experiment=info.experiment, branch=info.name, seq=seq,
                    event_type=new.type, schema_version=p.version, payload_json=p.payload_json,
                    causation_id=new.causation_id, correlation_id=new.correlation_id,
                    idempotency_key=new.idempotency_key, actor=actor, recorded_at=recorded_text,
                )
                rows.append((
                    event_id, seq, new.type, p.version, orjson.Fragment(p.payload_json), new.causation_id,
                    new.correlation_id, new.idempotency_key, actor, prev, digest,
                ))  # in sql.INSERT_ROWS' order
                prev = digest
            cursor = self.conn.cursor().execute(sql.INSERT_ROWS, (
                info.branch_id, sent.recorded_at, Jsonb(orjson.dumps(rows), dumps=already_json),
            ))
            sent.chunks.append((chunk, rows, cursor))
        return sent

    # -- reading ----------------------------------------------------------------

    def read_branch(self, ref: BranchRef, after_seq: int = 0, upto_seq: int | None = None,
                    types: Sequence[str] | None = None,
                    payload_contains: dict[str, Any] | None = None) -> list[StoredEvent]:
        """The effective history of a branch: inherited prefix, then its own events; only
        those of `types`, and whose stored payload contains `payload_contains` (jsonb @>),
        when given: a reader after a few events of a long history decodes only those. The
        payload is matched as stored, before upcasting: a filter on a field that an older
        version of the type spelled differently misses those events."""
        info = self.branch(ref.branch_ref)
        if upto_seq is None and ref.seq is not None:
            upto_seq = ref.seq
        ids, lows, highs = [], [], []
        for branch_id, after, upto in info.segments:
            bounds = [b for b in (upto, upto_seq) if b is not None]
            ids.append(branch_id)
            lows.append(max(after, after_seq))
            highs.append(min(bounds) if bounds else None)
        conditions: list[str] = []
        filter_params: list[Any] = []
        if types is not None:
            conditions.append("e.type = ANY(%s::text[])")
            filter_params.append(list(types))
        if payload_contains is not None:
            conditions.append("e.payload @> %s::jsonb")
            filter_params.append(Jsonb(payload_contains))
        filters = " WHERE " + " AND ".join(conditions) if conditions else ""
        rows = self.conn.execute(
            sql.SELECT_EVENTS
            + " JOIN unnest(%s::bigint[], %s::bigint[], %s::bigint[]) AS s(branch_id, lo, hi)"
            " ON e.branch_id = s.branch_id AND e.seq > s.lo AND (s.hi IS NULL OR e.seq <= s.hi)"
            + filters + " ORDER BY e.seq",
            (ids, lows, highs, *filter_params),
        ).fetchall()
        return [row_to_event(row) for row in rows]

    def read_all(self, after: GlobalPosition = GlobalPosition(), limit: int = 1000) -> list[StoredEvent]:
        """Committed events after `after` in the global order; see sql.READ_AFTER for why it is safe."""
        rows = self.conn.execute(sql.READ_AFTER, (str(after.transaction_id), after.position, limit)).fetchall()
        return [row_to_event(row) for row in rows]

    def last_position(self) -> GlobalPosition:
        """The global position of the newest committed event this connection can see."""
        row = self.conn.execute(
            "SELECT transaction_id::text, position FROM events ORDER BY transaction_id DESC, position DESC LIMIT 1"
        ).fetchone()
        return GlobalPosition(int(row[0]), row[1]) if row else GlobalPosition()

    def get_event(self, event_id: str) -> StoredEvent:
        try:
            row = self.conn.execute(sql.SELECT_EVENTS + " WHERE e.event_id = %s::uuid", (event_id,)).fetchone()
        except pg_errors.InvalidTextRepresentation:
            raise UsageError(f"bad event id {event_id!r}") from None
        if row is None:
            raise NotFoundError(f"no event {event_id}")
        return row_to_event(row)


def _clip(segments: tuple[tuple[int, int, int | None], ...], seq: int) -> tuple[tuple[int, int, int | None], ...]:
    """The parent's segments cut at the fork point: what a child inherits."""
    clipped = []
    for branch_id, after, upto in segments:
        if after >= seq:
            continue
        clipped.append((branch_id, after, seq if upto is None else min(upto, seq)))
    return tuple(clipped)


def _is_key_conflict(exc: pg_errors.UniqueViolation) -> bool:
    return "idempotency_key" in (exc.diag.constraint_name or "")


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
