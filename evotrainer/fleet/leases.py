"""Leases on running tasks: claiming a task, renewing its lease, ending it.

A worker claims a task in one transaction that locks its fleet_tasks row, so of any
number of deliveries of one message (redelivery after a crash, a Redis visibility
timeout, a re-publish) at most one runs at a time; the others see a live lease and
drop their copy. A lease lives only as long as the heartbeat renews it: when a worker
vanishes, the dispatcher's reaper finds the expired lease and publishes the task again,
without waiting for the broker's own (deliberately huge) visibility timeout.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from dataclasses import dataclass
from typing import Any

import psycopg

from evotrainer.fleet import progress

log = logging.getLogger(__name__)


# Insert the hand-off rows for a batch of TaskRequested events (one array per column: one
# statement for the batch, where executemany would send and plan one per row); a second
# request with the same task id on the branch names the same work, and is not run again.
# The arrays travel in binary (%b): psycopg's text format quotes element by element, which
# cost a few milliseconds per batch of hundreds, before the first task could be published.
# published_at set (`being_published`): taken for publishing by whoever records the rows
# (a requester publishing its own task, evotrainer.fleet.handoff). Returns the rows inserted:
# a request that has its row already is someone else's to publish.
RECORD_HANDOFFS = """
INSERT INTO fleet_tasks (event_id, experiment, branch, task_id, kind, queue, max_attempts, requested_at,
                         published_at)
SELECT u.*, CASE WHEN %b::bool THEN now() END
  FROM unnest(%b::uuid[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::int[],
              %b::timestamptz[]) AS u
ON CONFLICT DO NOTHING
RETURNING event_id::text
"""


def record_handoffs(conn: psycopg.Connection[Any], requests: list[Any], being_published: bool = False) -> set[str]:
    """Hand-off rows for TaskRequested events (StoredEvent) that have none; the event ids
    of the rows inserted."""
    return {row[0] for row in conn.execute(RECORD_HANDOFFS, [
        being_published, [e.event_id for e in requests], [e.experiment for e in requests],
        [e.branch for e in requests], [e.payload["task_id"] for e in requests], [e.payload["kind"] for e in requests],
        [e.payload["queue"] for e in requests], [e.payload.get("max_attempts", 3) for e in requests],
        [e.recorded_at for e in requests],
    ])}


@dataclass(frozen=True)
class Claim:
    """The outcome of trying to start a task."""

    run: bool
    """True: this worker holds the lease and should run attempt `attempt`."""
    attempt: int = 0
    reason: str = ""
    exhausted: bool = False
    """True: every allowed attempt was used up; record TaskFailed instead of running."""


def holder_is_gone(holder: str | None, running_here: set[str], event_id: str) -> bool:
    """Whether a lease's holder is known dead without waiting for it to expire: a process
    on this host that no longer exists, or this very process not running the task (its
    attempt ended in an error it could not record)."""
    if not holder:
        return True
    host, _, pid_text = holder.rpartition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return event_id not in running_here
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


# The common case in one statement (one round trip, one commit): a task nobody runs is
# taken. UPDATE locks the row and re-checks its WHERE against the newest version, so of
# concurrent claimers exactly one matches; the others fall to the slow path. The CTEs
# alone are CLAIM_FREE_CTES, for statements that claim and read something in one go.
#
# A statement that claims commits asynchronously (sql.ASYNC_COMMIT in its select list): a
# claim lost in a server crash only means the task runs again, which the outcome's
# idempotency key makes harmless. The write-ahead log is flushed in order, so no outcome
# is ever durable while its claim is not.
CLAIM_FREE_CTES = """
claimed AS (
    UPDATE fleet_tasks SET state = 'running', attempts = attempts + 1, worker = %(worker)s, heartbeat_at = now(),
           lease_expires_at = now() + make_interval(secs => %(lease_s)s)
    WHERE event_id = %(event_id)s AND state IN ('pending', 'published') AND attempts < max_attempts
    RETURNING event_id, attempts),
started AS (
    INSERT INTO fleet_attempts (event_id, attempt, worker, started_at)
    SELECT event_id, attempts, %(worker)s, now() FROM claimed
    ON CONFLICT (event_id, attempt) DO UPDATE SET worker = EXCLUDED.worker, started_at = now(), outcome = 'running',
        ended_at = NULL, error = NULL
    RETURNING attempt)
"""

def claim_contended(conn: psycopg.Connection[Any], event_id: str, worker: str, lease_s: float,
                    running_here: set[str]) -> Claim:
    """The slow path, when the free claim matched nothing: find out why, under the row's lock."""
    with conn.transaction():
        return _claim_locked(conn, event_id, worker, lease_s, running_here)


def _claim_locked(conn: psycopg.Connection[Any], event_id: str, worker: str, lease_s: float,
                     running_here: set[str]) -> Claim:
    row = conn.execute(
        "SELECT state, attempts, max_attempts, worker, lease_expires_at > now() AS leased, last_error"
        " FROM fleet_tasks WHERE event_id = %s FOR UPDATE",
        (event_id,),
    ).fetchone()
    if row is None:
        return Claim(False, reason="no hand-off recorded for this event")
    state, attempts, max_attempts, holder, leased, last_error = row
    if state in ("completed", "failed"):
        return Claim(False, attempts, reason=f"already {state}")
    if state == "running" and leased and not holder_is_gone(holder, running_here, event_id):
        return Claim(False, attempts, reason=f"attempt {attempts} is running on {holder}")
    if state == "running":
        _end_attempt(conn, event_id, attempts, "lost", f"lease of {holder} taken over by {worker}")
    if attempts >= max_attempts:
        return Claim(False, attempts, reason=exhausted_message(attempts, max_attempts, last_error), exhausted=True)
    attempt = attempts + 1
    conn.execute(
        "UPDATE fleet_tasks SET state = 'running', attempts = %s, worker = %s, heartbeat_at = now(),"
        " lease_expires_at = now() + make_interval(secs => %s) WHERE event_id = %s",
        (attempt, worker, lease_s, event_id),
    )
    conn.execute(
        "INSERT INTO fleet_attempts (event_id, attempt, worker, started_at) VALUES (%s, %s, %s, now())"
        " ON CONFLICT (event_id, attempt) DO UPDATE SET worker = EXCLUDED.worker, started_at = now(),"
        " outcome = 'running', ended_at = NULL, error = NULL",
        (event_id, attempt, worker),
    )
    return Claim(True, attempt)


def exhausted_message(attempts: int, max_attempts: int, last_error: str | None) -> str:
    why = last_error or "the worker running it was lost each time (killed, out of memory, or the host went away)"
    return f"gave up after {attempts} of {max_attempts} allowed attempts: {why}"


def release(conn: psycopg.Connection[Any], event_id: str, attempt: int, worker: str, error: str) -> None:
    """Give the lease back after a transient error: the retry may start at once."""
    conn.execute(
        "UPDATE fleet_tasks SET state = 'published', worker = NULL, lease_expires_at = NULL, last_error = %s"
        " WHERE event_id = %s AND state = 'running' AND worker = %s AND attempts = %s",
        (error, event_id, worker, attempt),
    )
    _end_attempt(conn, event_id, attempt, "retry", error)


def _end_attempt(conn: psycopg.Connection[Any], event_id: str, attempt: int, outcome: str, error: str | None) -> None:
    conn.execute(
        "UPDATE fleet_attempts SET outcome = %s, ended_at = now(), error = %s"
        " WHERE event_id = %s AND attempt = %s AND outcome = 'running'",
        (outcome, error, event_id, attempt),
    )


class LeaseKeeper:
    """One thread per worker process that renews the leases of the tasks it runs.

    It has its own connection, so a task blocked in a long computation (or whose own
    connection died) keeps its lease for as long as the process is alive; it reconnects
    when its connection is lost.
    """

    def __init__(self, conninfo: str, worker: str, lease_s: float, heartbeat_s: float) -> None:
        self.conninfo = conninfo
        self.worker = worker
        self.lease_s = lease_s
        self.heartbeat_s = heartbeat_s
        self.running: set[str] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: psycopg.Connection[Any] | None = None

    def hold(self, event_id: str) -> None:
        with self._lock:
            self.running.add(event_id)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="evotrainer-lease", daemon=True)
                self._thread.start()

    def drop(self, event_id: str) -> None:
        with self._lock:
            self.running.discard(event_id)

    def snapshot(self) -> set[str]:
        with self._lock:
            return set(self.running)

    def _loop(self) -> None:
        while not self._wake.wait(self.heartbeat_s):
            held = self.snapshot()
            if held:
                self._renew(sorted(held))

    def _renew(self, event_ids: list[str]) -> None:
        try:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(self.conninfo, autocommit=True, connect_timeout=10,
                                             application_name="evotrainer-lease")
            # Each beat also carries the task's newest progress line (fleet/progress.py).
            self._conn.execute(
                "UPDATE fleet_tasks t SET lease_expires_at = now() + make_interval(secs => %s), heartbeat_at = now(),"
                " progress = COALESCE(p.line, t.progress)"
                " FROM unnest(%s::uuid[], %s::text[]) AS p(event_id, line)"
                " WHERE t.event_id = p.event_id AND t.worker = %s AND t.state = 'running'",
                (self.lease_s, event_ids, progress.latest(event_ids), self.worker),
            )
        except psycopg.Error as exc:
            # A lost connection is retried at the next beat; the lease has lease_s / heartbeat_s
            # beats of slack before it expires.
            log.warning("lease renewal failed, will reconnect: %s", exc)
            if self._conn is not None:
                self._conn.close()
            self._conn = None

    def stop(self) -> None:
        self._wake.set()
