"""Opening the event store for a command (migrating it on first use)."""

from __future__ import annotations

from evotrainer.store import EventStore


def open_store() -> EventStore:
    return EventStore.connect()
