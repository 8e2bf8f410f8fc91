"""The fleet's one Celery task: run a requested task, given its TaskRequested event id.

Thin by design: the message carries an event id, never an object; everything else is
loaded from the event store and the work is done by evotrainer.fleet.execute. Transient
errors (a lost database connection, a broker hiccup) are retried with exponential
backoff; everything else was already recorded as TaskFailed and is not retried.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
import uuid
from dataclasses import dataclass, field

from celery import Task

from evotrainer.fleet.config import FleetConfig
from evotrainer.fleet.errors import TransientTaskError
from evotrainer.fleet.execute import TRANSIENT_DB_ERRORS, AttemptInterrupted, execute, release_lease
from evotrainer.fleet.leases import LeaseKeeper
from evotrainer.store.eventstore import EventStore
from workers.app import TASK_NAME, app

log = logging.getLogger(__name__)


@dataclass
class WorkerRuntime:
    """Per-process state: built lazily in the process that runs tasks (after any fork),
    so no connection or thread ever crosses a fork."""

    cfg: FleetConfig
    conninfo: str
    keeper: LeaseKeeper
    local: threading.local = field(default_factory=threading.local)

    def store(self) -> EventStore:
        store = getattr(self.local, "store", None)
        if store is None or store.conn.closed:
            store = EventStore.connect(self.conninfo, actor=self.keeper.worker)
            self.local.store = store
        return store

    def discard_store(self) -> None:
        store = getattr(self.local, "store", None)
        self.local.store = None
        if store is not None:
            store.close()


_runtime: WorkerRuntime | None = None
_runtime_pid = 0
_runtime_lock = threading.Lock()


def runtime() -> WorkerRuntime:
    global _runtime, _runtime_pid
    with _runtime_lock:
        if _runtime is None or _runtime_pid != os.getpid():
            import psycopg

            from evotrainer.store.database import ensure_database

            # The name is host:pid of the process that runs the task (a pool child, not
            # the parent that imported this module): leases are checked against it.
            cfg = dataclasses.replace(FleetConfig.from_env(), worker_name=f"{socket.gethostname()}:{os.getpid()}")
            conninfo = psycopg.conninfo.make_conninfo(ensure_database(), application_name="evotrainer-worker")
            keeper = LeaseKeeper(conninfo, cfg.worker_name, cfg.lease_s, cfg.heartbeat_s)
            _runtime, _runtime_pid = WorkerRuntime(cfg, conninfo, keeper), os.getpid()
        return _runtime


@app.task(name=TASK_NAME, bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_task(self: Task, event_id: str) -> str:
    try:
        uuid.UUID(str(event_id))
    except ValueError:
        # Not ours to record: without a valid event id there is no branch to record on.
        log.error("dropping a malformed task message: %r is not a TaskRequested event id", event_id)
        return "rejected"
    try:
        rt = runtime()
        outcome = execute(rt.store(), event_id, rt.keeper, rt.cfg.durable_close_after_s)
    except (TransientTaskError, *TRANSIENT_DB_ERRORS) as exc:
        # Connecting failed, or the attempt was interrupted: the connection may be dead.
        if _runtime is not None:
            _runtime.discard_store()
            if isinstance(exc, AttemptInterrupted):
                release_lease(_runtime.conninfo, event_id, exc.attempt, _runtime.keeper.worker, str(exc))
        cfg = _runtime.cfg if _runtime is not None else FleetConfig.from_env()
        retries = self.request.retries
        log.warning("transient error on %s (retry %d): %s", event_id, retries + 1, exc)
        # Past the last retry the message is acknowledged, but the task is not lost: the
        # dispatcher publishes it again when its lease expires, or, if it was released or
        # never claimed, after EVOTRAINER_REPUBLISH_AFTER_SECONDS.
        raise self.retry(exc=exc, countdown=cfg.backoff(retries), max_retries=cfg.max_transient_retries) from exc
    log.info("task %s: %s (attempt %d) %s", event_id, outcome.state, outcome.attempt, outcome.detail)
    return outcome.state
