"""Running one requested task, from its event id to its recorded outcome.

This is the whole life of a delivery, shared by Celery workers and the in-process runner:
claim the lease and load the request by id (one round trip), run the kind's plain
function, then close the lease and append TaskCompleted (with the function's domain
events) or TaskFailed in one transaction (one commit). The outcome event's idempotency
key is `<task_id>:outcome`, so the unique index allows one outcome per task whatever
races; every outcome (and its domain events, `<task_id>:<n>`) is appended in the
transaction that closes the task's row, which matches only while the row is open, so a
redelivered or re-published task never records anything twice. A connection lost after
the work finished is no reason to run it again: the outcome is recorded on a new
connection, with backoff, once the database answers (_close_on_a_new_connection).

The close of an attempt that ran less than `durable_close_after_s` (FleetConfig) commits
without waiting for the disk, which is most of what recording a millisecond task's
outcome would otherwise cost. Postgres writes it out within a few hundred milliseconds
(wal_writer_delay); a crash of the server before then undoes the close as if it had
rolled back, leaving the task's row as it was (a lease that expires, or a hand-off that
is published again), so the task runs again: nothing is lost or recorded twice, and the
crash costs re-running less than `durable_close_after_s` of work, and one of the task's
attempts (the last allowed attempt's outcome always waits for the disk). Whatever
depends on such an outcome and commits durably (the next append to its branch, a fork
at it, a consumer's checkpoint past it) makes it durable too, since the log is flushed
in order. Only a reader outside the database (a listing, an export) can have seen an
outcome that a crash then replaces with the second run's.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import traceback
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import psycopg

from evotrainer.errors import ConcurrencyError, DatabaseUnavailableError, InvalidPayloadError
from evotrainer.events import TaskCompleted, TaskFailed, TaskRequested
from evotrainer.fleet import leases, progress
from evotrainer.fleet.config import FleetConfig
from evotrainer.fleet.errors import TaskInputError, TransientTaskError
from evotrainer.fleet.registry import TaskRequest, TaskResult, kind_spec, validate_inputs
from evotrainer.refs import BranchRef
from evotrainer.store import sql
from evotrainer.store.conninfo import conninfo_of
from evotrainer.store.eventstore import EventStore
from evotrainer.store.records import NewEvent, StoredEvent, row_to_event

log = logging.getLogger(__name__)

# Errors that say nothing about the task itself: the database connection went away, or
# another writer got to the branch first (trying again reads the new head).
TRANSIENT_DB_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError, DatabaseUnavailableError, ConcurrencyError)
MAX_TRACEBACK_CHARS = 20_000


def outcome_key(task_id: str) -> str:
    """The idempotency key of a task's one outcome event (TaskCompleted or TaskFailed)."""
    return f"{task_id}:outcome"


@dataclass(frozen=True)
class Outcome:
    """What became of one delivery: completed, failed, or skipped (with why)."""

    state: str
    attempt: int = 0
    detail: str = ""


class AttemptInterrupted(TransientTaskError):
    """A transient error in the middle of an attempt; the lease should be released."""

    def __init__(self, event_id: str, attempt: int, cause: BaseException) -> None:
        super().__init__(f"attempt {attempt} of {event_id} hit a transient error: {type(cause).__name__}: {cause}")
        self.event_id = event_id
        self.attempt = attempt


def execute(store: EventStore, event_id: str, keeper: leases.LeaseKeeper,
            durable_after_s: float = FleetConfig.durable_close_after_s) -> Outcome:
    """Run the task whose TaskRequested event is `event_id`, once, if nobody else is.

    Raises TransientTaskError (AttemptInterrupted once the lease was taken) when it is
    worth trying again; every other failure is recorded as TaskFailed. An attempt that
    ran at least `durable_after_s` waits for its outcome to reach the disk (see above).
    """
    worker = keeper.worker
    try:
        claimed, event = _claim_and_load(store, event_id, keeper)
        if claimed.exhausted and event is not None:
            return record_exhausted(store, event, claimed)
    except TRANSIENT_DB_ERRORS as exc:
        raise TransientTaskError(f"could not claim {event_id}: {type(exc).__name__}: {exc}") from exc
    if not claimed.run or event is None:
        log.info("skipping delivery of %s: %s", event_id, claimed.reason or "no such event")
        return Outcome("skipped", claimed.attempt, claimed.reason)
    attempt = claimed.attempt
    keeper.hold(event_id)
    try:
        with progress.running(event_id):
            return _run_attempt(store, event, attempt, worker, durable_after_s)
    except TransientTaskError as exc:
        raise AttemptInterrupted(event_id, attempt, exc) from exc
    except TRANSIENT_DB_ERRORS as exc:
        raise AttemptInterrupted(event_id, attempt, exc) from exc
    finally:
        keeper.drop(event_id)


# Claim the task and load its request in one statement: one round trip, one commit. The
# SELECT reads the events table, which the CTEs leave alone, so their snapshot is enough;
# its first column is the attempt started (NULL: not claimed, see _claim_and_load).
CLAIM_AND_LOAD = f"""
WITH {leases.CLAIM_FREE_CTES}
SELECT (SELECT attempt FROM started), {sql.EVENT_COLUMNS}, {sql.ASYNC_COMMIT}
  FROM events e JOIN branches b USING (branch_id) WHERE e.event_id = %(event_id)s::uuid
"""


def _claim_and_load(
    store: EventStore, event_id: str, keeper: leases.LeaseKeeper
) -> tuple[leases.Claim, StoredEvent | None]:
    """Claim the task and load its request: on a busy machine the round trips, not the
    statements, are what a short task costs."""
    conn = store.conn
    params = {"event_id": event_id, "worker": keeper.worker, "lease_s": keeper.lease_s}
    row = conn.execute(CLAIM_AND_LOAD, params).fetchone()
    event = row_to_event(row[1:-1]) if row else None
    if row is not None and row[0] is not None:
        return leases.Claim(True, row[0]), event
    return leases.claim_contended(conn, event_id, keeper.worker, keeper.lease_s, keeper.snapshot()), event


def _run_attempt(store: EventStore, event: StoredEvent, attempt: int, worker: str, durable_after_s: float) -> Outcome:
    started = time.monotonic()
    conninfo = conninfo_of(store)  # read now: a connection that dies cannot say where it was
    try:
        task = _request_of(event)
        spec = kind_spec(task.kind)
        request = TaskRequest(store, event, task, validate_inputs(spec, task), attempt, worker)
        result = spec.function(request)
        if not isinstance(result, TaskResult):
            raise TypeError(f"task kind {task.kind} returned {type(result).__name__}, not a TaskResult")
        ran_s = time.monotonic() - started
        durable = _waits_for_disk(event, attempt, ran_s, durable_after_s)
        return _complete(store, event, task, attempt, worker, result, ran_s, durable, conninfo)
    except (TransientTaskError, *TRANSIENT_DB_ERRORS):
        raise
    except Exception as exc:  # noqa: BLE001
        # The one place that records an arbitrary failure: whatever a task function raises
        # (or its results fail validation) is the task's outcome, recorded once, never retried.
        durable = _waits_for_disk(event, attempt, time.monotonic() - started, durable_after_s)
        return record_failure(store, event, attempt, worker, exc, durable=durable)


def _waits_for_disk(event: StoredEvent, attempt: int, ran_s: float, durable_after_s: float) -> bool:
    """Whether this attempt's outcome commits durably (see the module's docstring). The
    last allowed attempt's always does: were it undone by a crash, the reaper would find
    the task's attempts used up and record a task that succeeded as failed. (A request
    whose limit cannot be read counts as its last attempt.)"""
    max_attempts = event.payload.get("max_attempts")
    last = not isinstance(max_attempts, int) or attempt >= max_attempts
    return last or ran_s >= durable_after_s


def _request_of(event: StoredEvent) -> TaskRequested:
    if event.type != "TaskRequested":
        raise TaskInputError(f"event {event.event_id} is a {event.type}, not a TaskRequested")
    model = event.model()
    assert isinstance(model, TaskRequested)
    return model


def _complete(store: EventStore, event: StoredEvent, task: TaskRequested, attempt: int, worker: str,
              result: TaskResult, duration_s: float, durable: bool = True, conninfo: str | None = None) -> Outcome:
    meta: dict[str, Any] = {"causation_id": event.event_id, "correlation_id": event.correlation_id or event.event_id}
    domain = [
        dataclasses.replace(e, idempotency_key=e.idempotency_key or f"{task.task_id}:{n}",
                            causation_id=e.causation_id or meta["causation_id"],
                            correlation_id=e.correlation_id or meta["correlation_id"])
        for n, e in enumerate(result.events, start=1)
    ]
    completed = TaskCompleted(task_id=task.task_id, worker=worker, attempt=attempt, outputs=result.outputs,
                              duration_s=round(duration_s, 6))
    outcome = NewEvent.of(completed, idempotency_key=outcome_key(task.task_id), **meta)
    events = [*domain, outcome]
    try:
        closed = _close_and_append(store, event, attempt, "completed", None, events, durable)
    except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
        if conninfo is None or not store.conn.closed:
            raise
        # The work is done and its outcome keyed: record it when the database is back
        # rather than throw the attempt away (the close matches only while this attempt's
        # row is open, so a task the reaper handed on meanwhile records nothing twice).
        log.warning("lost the database while recording %s (%s): recording it again", task.task_id, exc)
        closed = _close_on_a_new_connection(conninfo, store.actor, event, attempt, events, durable)
    if closed:
        return Outcome("completed", attempt)
    return _already_closed(attempt)


RECORD_AGAIN_DELAYS_S = (0.5, 1, 2, 4, 8, 15, 30)
"""Waits before each try to record a finished attempt on a new connection (about a minute
in all: within a lease, whose heartbeats keep it while the database is back)."""


def _close_on_a_new_connection(conninfo: str, actor: str, event: StoredEvent, attempt: int,
                               events: list[NewEvent], durable: bool) -> bool:  # fmt: skip
    for n, delay in enumerate(RECORD_AGAIN_DELAYS_S, start=1):
        time.sleep(delay)
        try:
            with EventStore.connect(conninfo, actor=actor) as fresh:
                return _close_and_append(fresh, event, attempt, "completed", None, events, durable)
        except TRANSIENT_DB_ERRORS as exc:
            if n == len(RECORD_AGAIN_DELAYS_S):
                raise
            log.warning("recording %s again failed (%s); trying again in %gs", event.event_id, exc,
                        RECORD_AGAIN_DELAYS_S[n])  # fmt: skip
    return False


# Close the task's row and append its events in one statement (migration 0006): the
# statement is its transaction, and its branch lock is held only while the server works.
CLOSE_AND_APPEND = (
    "SELECT * FROM evotrainer_fleet_close(%(task)s, %(attempt)s, %(state)s, %(error)s, %(branch)s,"
    " %(fork_seq)s, %(fork_hash)s, %(recorded_at)s, %(events)s)"
)
# The same, committed without waiting for the disk (see the module's docstring). The filter
# runs before the statement's implicit transaction commits, and holds for every row.
CLOSE_AND_APPEND_NO_WAIT = f"{CLOSE_AND_APPEND} WHERE {sql.ASYNC_COMMIT} = 'off'"
# evotrainer_fleet_close() undoes everything with this when the outcome's key was taken.
OUTCOME_TAKEN_SQLSTATE = "EV001"


def _close_and_append(store: EventStore, event: StoredEvent, attempt: int, state: str, error: str | None,
                      events: list[NewEvent], durable: bool = True) -> bool:
    """Close the task's row and append its outcome (the last of `events`) in one
    transaction; False, with nothing written, when the task was already closed.

    Closing first locks the row, so no other attempt can append an outcome (or domain
    events) until this commits, and one commit makes both durable: the dispatcher never
    reads an outcome whose row is still open. An outcome already in the branch under the
    outcome's key (appended by other means) stands, and this is undone. Inside a caller's
    transaction (the reaper's) the statement runs under a savepoint, so that undoing it
    leaves the caller's transaction usable. Not `durable`: the statement's own transaction
    commits without waiting for the disk (never a caller's, whose commit is its own).
    """
    params = {"task": event.event_id, "attempt": attempt, "state": state, "error": error}
    in_transaction = store.in_transaction()
    statement = CLOSE_AND_APPEND if durable or in_transaction else CLOSE_AND_APPEND_NO_WAIT
    try:
        with store.transaction() if in_transaction else nullcontext():
            stored = store.append_through(BranchRef(event.experiment, event.branch), events, statement, params)
    except psycopg.Error as exc:
        if exc.sqlstate == OUTCOME_TAKEN_SQLSTATE:
            return False
        raise
    return stored is not None


def _already_closed(attempt: int) -> Outcome:
    return Outcome("skipped", attempt, "another attempt already recorded the outcome")


def record_failure(store: EventStore, event: StoredEvent, attempt: int, worker: str, exc: BaseException,
                   durable: bool = True) -> Outcome:
    """Append TaskFailed for `exc` (class, message, traceback) and close the task."""
    message = str(exc) or repr(exc)
    if isinstance(exc, InvalidPayloadError):
        message = f"the task's results were refused: {message}"
    tb = "" if isinstance(exc, TaskInputError) else "".join(traceback.format_exception(exc))[-MAX_TRACEBACK_CHARS:]
    error_class = type(exc).__qualname__
    if type(exc).__module__ not in ("builtins", None):
        error_class = f"{type(exc).__module__}.{error_class}"
    task_id = event.payload.get("task_id") or event.event_id
    failed = TaskFailed(task_id=task_id, worker=worker, attempt=max(attempt, 1), error_class=error_class,
                        message=message, traceback=tb, retryable=False)
    return _append_failure(store, event, failed, attempt, durable)


def record_exhausted(store: EventStore, event: StoredEvent, claimed: leases.Claim) -> Outcome:
    failed = TaskFailed(task_id=event.payload["task_id"], worker="", attempt=max(claimed.attempt, 1),
                        error_class="AttemptsExhausted", message=claimed.reason, retryable=False)
    return _append_failure(store, event, failed, claimed.attempt)


def _append_failure(store: EventStore, event: StoredEvent, failed: TaskFailed, attempt: int,
                    durable: bool = True) -> Outcome:
    meta = {"causation_id": event.event_id, "correlation_id": event.correlation_id or event.event_id}
    outcome = NewEvent.of(failed, idempotency_key=outcome_key(failed.task_id), **meta)
    detail = f"{failed.error_class}: {failed.message}"
    if _close_and_append(store, event, attempt, "failed", detail[:2000], [outcome], durable):
        return Outcome("failed", attempt, detail)
    return _already_closed(attempt)


def release_lease(conninfo: str, event_id: str, attempt: int, worker: str, error: str) -> None:
    """Best effort, on a fresh connection: give back the lease of an interrupted attempt.
    If this fails too, the lease simply expires and the reaper requeues the task."""
    try:
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=10) as conn, conn.transaction():
            leases.release(conn, event_id, attempt, worker, error[:2000])
    except psycopg.Error as exc:
        log.warning("could not release the lease of %s (it will expire): %s", event_id, exc)

