"""Consumers that follow the global order and save their position with their output.

    sub = Subscription(store, "projections")
    sub.process(lambda conn, events: write_rows(conn, events))

`process` runs in one transaction: it locks the subscription's row (so two instances of
the same consumer never interleave), reads the next committed events, lets the handler
write its output on the same connection, and moves the checkpoint. Commit makes the
output and the new position durable together; a crash rolls both back, so every event
is handled exactly once as far as the database can tell.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg

from evotrainer.store.eventstore import EventStore
from evotrainer.store.records import GlobalPosition, StoredEvent

Handler = Callable[[psycopg.Connection[Any], list[StoredEvent]], None]


class Subscription:
    def __init__(self, store: EventStore, name: str) -> None:
        self.store = store
        self.name = name

    def position(self) -> GlobalPosition:
        row = self.store.conn.execute(
            "SELECT transaction_id::text, position FROM subscriptions WHERE name = %s", (self.name,)
        ).fetchone()
        return GlobalPosition(int(row[0]), row[1]) if row else GlobalPosition()

    def process(self, handler: Handler, limit: int = 1000) -> int:
        """Handle the next batch of at most `limit` events; returns how many were handled."""
        conn = self.store.conn
        with conn.transaction():
            conn.execute("INSERT INTO subscriptions (name) VALUES (%s) ON CONFLICT DO NOTHING", (self.name,))
            txid, position = conn.execute(
                "SELECT transaction_id::text, position FROM subscriptions WHERE name = %s FOR UPDATE",
                (self.name,),
            ).fetchone()  # type: ignore[misc]
            events = self.store.read_all(GlobalPosition(int(txid), position), limit)
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
