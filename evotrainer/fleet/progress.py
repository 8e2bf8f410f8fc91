"""What the task running in this thread last said about its progress, for the heartbeat.

    with running(event_id):          # the fleet, around a task function
        report("train step 4/20 reward 0.312 ...")   # the task, as it goes

The lease heartbeat (leases.LeaseKeeper) writes each held task's latest line into its
`fleet_tasks` row, so `evotrainer status` (and anything reading the table) shows the
running task's progress from another process, at most one heartbeat old. A line reported
outside a fleet task (a plain library call) goes nowhere.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

_current = threading.local()
_latest: dict[str, str] = {}
_lock = threading.Lock()


@contextmanager
def running(event_id: str) -> Iterator[None]:
    """Mark `event_id` as the task this thread runs until the block ends."""
    _current.event_id = event_id
    try:
        yield
    finally:
        _current.event_id = None
        with _lock:
            _latest.pop(event_id, None)


def report(line: str) -> None:
    """The current task's newest progress line (ignored outside a task)."""
    event_id = getattr(_current, "event_id", None)
    if event_id is not None:
        with _lock:
            _latest[event_id] = line


def latest(event_ids: list[str]) -> list[str | None]:
    """The newest line of each task, None where it reported nothing yet."""
    with _lock:
        return [_latest.get(event_id) for event_id in event_ids]
