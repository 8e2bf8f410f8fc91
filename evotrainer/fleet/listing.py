"""What `evotrainer tasks` shows: every requested task, its state, worker and attempts.

Read-only. A TaskRequested the dispatcher has not seen yet has no fleet_tasks row; it is
listed as `requested` from the event log, so nothing asked for is ever invisible.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from evotrainer.store.eventstore import EventStore

# fleet_tasks' states as users read them: `pending` is recorded but not yet handed to
# the broker, which to a user is still just requested.
SHOWN_STATE = {"pending": "requested", "published": "queued", "running": "running",
               "completed": "completed", "failed": "failed"}
STATES = ("requested", "queued", "running", "completed", "failed")

LIST_TASKS = """
SELECT e.event_id::text, b.experiment, b.name, e.payload->>'task_id', e.payload->>'kind', e.payload->>'queue',
       coalesce(t.state, 'pending'), coalesce(t.attempts, 0),
       coalesce((e.payload->>'max_attempts')::int, 3), t.worker, e.recorded_at, t.finished_at,
       t.lease_expires_at, t.last_error
FROM events e
JOIN branches b ON b.branch_id = e.branch_id
LEFT JOIN fleet_tasks t ON t.event_id = e.event_id
WHERE e.type = 'TaskRequested' AND (%(experiment)s::text IS NULL OR b.experiment = %(experiment)s)
ORDER BY e.position
"""


@dataclass(frozen=True)
class TaskRow:
    event_id: str
    experiment: str
    branch: str
    task_id: str
    kind: str
    queue: str
    state: str
    attempts: int
    max_attempts: int
    worker: str | None
    requested_at: datetime
    finished_at: datetime | None
    lease_expires_at: datetime | None
    last_error: str | None

    def to_json(self) -> dict[str, Any]:
        row = asdict(self)
        for key in ("requested_at", "finished_at", "lease_expires_at"):
            row[key] = row[key].isoformat() if row[key] else None
        return row


def list_tasks(store: EventStore, experiment: str | None = None, states: set[str] | None = None) -> list[TaskRow]:
    rows = store.conn.execute(LIST_TASKS, {"experiment": experiment}).fetchall()
    tasks = [
        TaskRow(event_id, exp, branch, task_id, kind, queue, SHOWN_STATE[state], attempts, max_attempts, worker,
                requested_at, finished_at, lease_expires_at, last_error)
        for (event_id, exp, branch, task_id, kind, queue, state, attempts, max_attempts, worker, requested_at,
             finished_at, lease_expires_at, last_error) in rows
    ]
    return [t for t in tasks if not states or t.state in states]
