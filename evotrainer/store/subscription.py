"""Consumers that follow the global order and save their position with their output.

    sub = Subscription(store, "projections")
    sub.process(lambda conn, events: write_rows(conn, events))

`process` reads the next committed events (events never change, so this needs no lock),
then, in one transaction, locks the subscription's row (so two instances of the same
consumer never interleave; the batch is read again if another one moved the checkpoint
meanwhile), lets the handler write its output on the same connection, and moves the
checkpoint. Commit makes the output and the new position durable together; a crash
rolls both back, so every event is handled exactly once as far as the database can tell.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg

from evotrainer.store import sql
from evotrainer.store.eventstore import EventStore
from evotrainer.store.records import GlobalPosition, StoredEvent

Handler = Callable[[psycopg.Connection[Any], list[StoredEvent]], None]

_LOCK_CHECKPOINT = "SELECT transaction_id::text, position{also} FROM subscriptions WHERE name = %s FOR UPDATE"
LOCK_CHECKPOINT = _LOCK_CHECKPOINT.format(also="")
# The same, and the transaction commits asynchronously.
LOCK_CHECKPOINT_ASYNC = _LOCK_CHECKPOINT.format(also=f", {sql.ASYNC_COMMIT}")


class Subscription:
    """A named consumer of the global order. With `durable=False` its transactions commit
    asynchronously (see `process`)."""

    def __init__(self, store: EventStore, name: str, durable: bool = True) -> None:
        self.store = store
        self.name = name
        self.durable = durable

    def position(self) -> GlobalPosition:
        row = self.store.conn.execute(
            "SELECT transaction_id::text, position FROM subscriptions WHERE name = %s", (self.name,)
        ).fetchone()
        return GlobalPosition(int(row[0]), row[1]) if row else GlobalPosition()

    def process(self, handler: Handler, limit: int = 1000) -> int:
        """Handle the next batch of at most `limit` events; returns how many were handled.

        Events never change, so the next batch is read before any lock is taken: a
        consumer with nothing to do costs two reads and no transaction. With work to
        do, the checkpoint row is locked, and the batch is read again only if another
        instance moved the checkpoint meanwhile.

        A consumer whose output can be rebuilt from the log may commit asynchronously
        (`durable=False`): a crash of the server can then lose its last batches, but
        only together with the checkpoint that covered them, so they are handled again.
        """
        conn = self.store.conn
        seen: GlobalPosition | None = None
        if conn.autocommit:  # (on any other connection a read would open a transaction)
            seen = self.position()
            events = self.store.read_all(seen, limit)
            if not events:
                return 0
        lock = LOCK_CHECKPOINT if self.durable else LOCK_CHECKPOINT_ASYNC
        with conn.transaction():
            row = conn.execute(lock, (self.name,)).fetchone()
            if row is None:  # the consumer's first batch: its checkpoint row starts at zero
                conn.execute("INSERT INTO subscriptions (name) VALUES (%s) ON CONFLICT DO NOTHING", (self.name,))
                row = conn.execute(lock, (self.name,)).fetchone()
            assert row is not None
            locked = GlobalPosition(int(row[0]), row[1])
            if locked != seen:
                events = self.store.read_all(locked, limit)
                if not events:
                    return 0
            handler(conn, events)
            last = events[-1]
            conn.execute(
                "UPDATE subscriptions SET transaction_id = %s::text::xid8, position = %s WHERE name = %s",
                (str(last.transaction_id), last.position, self.name),
            )
        return len(events)

    def run_until_idle(self, handler: Handler, limit: int = 1000) -> int:
        """Process batches until nothing is left; returns the total handled."""
        total = 0
        while (handled := self.process(handler, limit)) > 0:
            total += handled
        return total

    def catch_up(self, handler: Handler, limit: int = 1000, timeout_s: float = 10.0) -> int:
        """Handle everything committed before this call, waiting for older transactions.

        `run_until_idle` stops at the oldest transaction still running anywhere in the
        cluster (see sql.READ_AFTER); this waits, up to `timeout_s`, until the events
        already committed when it was called are all handled. On timeout it returns what
        it handled: the rest follows on the next call, never out of order.
        """
        target = self.store.last_position()
        deadline = time.monotonic() + timeout_s
        total = self.run_until_idle(handler, limit)
        while self.position() < target and time.monotonic() < deadline:
            time.sleep(0.02)
            total += self.run_until_idle(handler, limit)
        return total
