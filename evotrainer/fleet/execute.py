"""Running one requested task, from its event id to its recorded outcome.

This is the whole life of a delivery, shared by Celery workers and the in-process runner:
claim the lease, load the request by id, run the kind's plain function, append
TaskCompleted (with the function's domain events) or TaskFailed, and close the lease.
The outcome event's idempotency key is `<task_id>:outcome`, so the unique index allows
one outcome per task whatever races; domain events (`<task_id>:<n>`) and failures are
appended in the transaction that closes the task's row, which matches only while the
row is open, so a redelivered or re-published task never records anything twice.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import traceback
from dataclasses import dataclass
from typing import Any

import psycopg

from evotrainer.errors import DatabaseUnavailableError, InvalidPayloadError
from evotrainer.events import TaskCompleted, TaskFailed, TaskRequested
from evotrainer.fleet import leases
from evotrainer.fleet.errors import TaskInputError, TransientTaskError
from evotrainer.fleet.registry import TaskRequest, TaskResult, kind_spec, validate_inputs
from evotrainer.refs import BranchRef
from evotrainer.store import sql
from evotrainer.store.eventstore import EventStore, row_to_event
from evotrainer.store.records import NewEvent, StoredEvent

log = logging.getLogger(__name__)

# Errors that say nothing about the task itself: the database connection went away.
TRANSIENT_DB_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError, DatabaseUnavailableError)
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


def execute(store: EventStore, event_id: str, keeper: leases.LeaseKeeper) -> Outcome:
    """Run the task whose TaskRequested event is `event_id`, once, if nobody else is.

    Raises TransientTaskError (AttemptInterrupted once the lease was taken) when it is
    worth trying again; every other failure is recorded as TaskFailed.
    """
    worker = keeper.worker
    try:
        claimed, event = _claim_and_load(store, event_id, keeper)
        if claimed.exhausted:
            return record_exhausted(store, event_id, claimed)
    except TRANSIENT_DB_ERRORS as exc:
        raise TransientTaskError(f"could not claim {event_id}: {type(exc).__name__}: {exc}") from exc
    if not claimed.run or event is None:
        log.info("skipping delivery of %s: %s", event_id, claimed.reason or "no such event")
        return Outcome("skipped", claimed.attempt, claimed.reason)
    attempt = claimed.attempt
    keeper.hold(event_id)
    try:
        return _run_attempt(store, event, attempt, worker)
    except TransientTaskError as exc:
        raise AttemptInterrupted(event_id, attempt, exc) from exc
    except TRANSIENT_DB_ERRORS as exc:
        raise AttemptInterrupted(event_id, attempt, exc) from exc
    finally:
        keeper.drop(event_id)


def _claim_and_load(
    store: EventStore, event_id: str, keeper: leases.LeaseKeeper
) -> tuple[leases.Claim, StoredEvent | None]:
    """Claim the task and load its request in one round trip (a pipeline): on a busy
    machine the round trips, not the statements, are what a short task costs."""
    conn = store.conn
    params = {"event_id": event_id, "worker": keeper.worker, "lease_s": keeper.lease_s}
    with conn.pipeline():
        claimed = conn.execute(leases.CLAIM_FREE, params)
        loaded = conn.execute(sql.SELECT_EVENTS + " WHERE e.event_id = %s::uuid", (event_id,))
    row, event_row = claimed.fetchone(), loaded.fetchone()
    event = row_to_event(event_row) if event_row else None
    if row is not None:
        return leases.Claim(True, row[0]), event
    return leases.claim_contended(conn, event_id, keeper.worker, keeper.lease_s, keeper.snapshot()), event


def _run_attempt(store: EventStore, event: StoredEvent, attempt: int, worker: str) -> Outcome:
    started = time.monotonic()
    try:
        task = _request_of(event)
        spec = kind_spec(task.kind)
        request = TaskRequest(store, event, task, validate_inputs(spec, task), attempt, worker)
        result = spec.function(request)
        if not isinstance(result, TaskResult):
            raise TypeError(f"task kind {task.kind} returned {type(result).__name__}, not a TaskResult")
        return _complete(store, event, task, attempt, worker, result, time.monotonic() - started)
    except (TransientTaskError, *TRANSIENT_DB_ERRORS):
        raise
    except Exception as exc:  # noqa: BLE001
        # The one place that records an arbitrary failure: whatever a task function raises
        # (or its results fail validation) is the task's outcome, recorded once, never retried.
        return record_failure(store, event, attempt, worker, exc)


def _request_of(event: StoredEvent) -> TaskRequested:
    if event.type != "TaskRequested":
        raise TaskInputError(f"event {event.event_id} is a {event.type}, not a TaskRequested")
    model = event.model()
    assert isinstance(model, TaskRequested)
    return model


def _complete(store: EventStore, event: StoredEvent, task: TaskRequested, attempt: int, worker: str,
              result: TaskResult, duration_s: float) -> Outcome:
    meta: dict[str, Any] = {"causation_id": event.event_id, "correlation_id": event.correlation_id or event.event_id}
    domain = [
        dataclasses.replace(e, idempotency_key=e.idempotency_key or f"{task.task_id}:{n}",
                            causation_id=e.causation_id or meta["causation_id"],
                            correlation_id=e.correlation_id or meta["correlation_id"])
        for n, e in enumerate(result.events, start=1)
    ]
    completed = TaskCompleted(task_id=task.task_id, worker=worker, attempt=attempt, outputs=result.outputs,
                              duration_s=round(duration_s, 6))
    ref = BranchRef(event.experiment, event.branch)
    outcome = NewEvent.of(completed, idempotency_key=outcome_key(task.task_id), **meta)
    if not domain:
        # Nothing but the outcome: its key's unique index alone allows one outcome per
        # task, so append it in its own transaction and close the row after (if this
        # process dies in between, the dispatcher closes the row when it reads the event).
        stored = store.append(ref, [outcome])[0]
        if stored.type != "TaskCompleted" or (stored.payload["worker"], stored.payload["attempt"]) != (worker, attempt):
            return _already_closed(attempt)
        leases.finish(store.conn, event.event_id, attempt, "completed")
        return Outcome("completed", attempt)
    # Domain events must not be appended after another attempt's outcome: close the row
    # first (locking it) and append in the same transaction.
    with store.transaction() as conn:
        if not leases.finish(conn, event.event_id, attempt, "completed"):
            return _already_closed(attempt)
        store.append(ref, [*domain, outcome])
    return Outcome("completed", attempt)


def _already_closed(attempt: int) -> Outcome:
    return Outcome("skipped", attempt, "another attempt already recorded the outcome")


def record_failure(store: EventStore, event: StoredEvent, attempt: int, worker: str, exc: BaseException,
                   retryable: bool = False) -> Outcome:
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
                        message=message, traceback=tb, retryable=retryable)
    return _append_failure(store, event, failed, attempt)


def record_exhausted(store: EventStore, event_id: str, claimed: leases.Claim) -> Outcome:
    event = store.get_event(event_id)
    failed = TaskFailed(task_id=event.payload["task_id"], worker="", attempt=max(claimed.attempt, 1),
                        error_class="AttemptsExhausted", message=claimed.reason, retryable=False)
    return _append_failure(store, event, failed, claimed.attempt)


def _append_failure(store: EventStore, event: StoredEvent, failed: TaskFailed, attempt: int) -> Outcome:
    meta = {"causation_id": event.event_id, "correlation_id": event.correlation_id or event.event_id}
    with store.transaction() as conn:
        if not leases.finish(conn, event.event_id, attempt, "failed", f"{failed.error_class}: {failed.message}"[:2000]):
            return _already_closed(attempt)
        stored = store.append(BranchRef(event.experiment, event.branch),
                              [NewEvent.of(failed, idempotency_key=outcome_key(failed.task_id), **meta)])[0]
        if stored.type != "TaskFailed":
            # A completion got there first (appended without the row lock, see _complete):
            # it stands, and this transaction, row update included, is undone.
            raise psycopg.Rollback()
        return Outcome("failed", attempt, f"{failed.error_class}: {failed.message}")
    return _already_closed(attempt)


def release_lease(conninfo: str, event_id: str, attempt: int, worker: str, error: str) -> None:
    """Best effort, on a fresh connection: give back the lease of an interrupted attempt.
    If this fails too, the lease simply expires and the reaper requeues the task."""
    try:
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=10) as conn, conn.transaction():
            leases.release(conn, event_id, attempt, worker, error[:2000])
    except psycopg.Error as exc:
        log.warning("could not release the lease of %s (it will expire): %s", event_id, exc)

