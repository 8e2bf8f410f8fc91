"""Running requested tasks in this process: the fleet without a broker.

The same outbox, leases and task code as a Celery fleet; only the hand-off differs: a
"publish" puts the event id on a local list that this process then executes. It is
what `evotrainer dispatcher` and `evotrainer worker` do when EVOTRAINER_BROKER_URL is
unset, and what a demo or a test calls directly:

    outcomes = run_in_process(store)     # until no requested task is left
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Sequence

from evotrainer.fleet.config import FleetConfig
from evotrainer.fleet.errors import TransientTaskError
from evotrainer.fleet.execute import AttemptInterrupted, Outcome, execute, release_lease
from evotrainer.fleet.leases import LeaseKeeper
from evotrainer.fleet.outbox import Dispatcher
from evotrainer.offline import go_offline
from evotrainer.store.conninfo import conninfo_of
from evotrainer.store.eventstore import EventStore

log = logging.getLogger(__name__)


class LocalQueue:
    """A Publisher that keeps the hand-offs for this process to run."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def publish(self, items: Sequence[tuple[str, str]]) -> None:
        self.items.extend(items)


def run_in_process(store: EventStore, cfg: FleetConfig | None = None,
                   stop: threading.Event | None = None) -> list[Outcome]:
    """Execute requested tasks until none is due (or, with `stop`, until it is set)."""
    go_offline()  # the tasks run in this process, which may have imported the hub already
    # Nothing published here is in a broker: a hand-off not run yet is due again at once.
    # The environment's settings (lease, heartbeat, ...) hold here as for a worker.
    cfg = dataclasses.replace(cfg or FleetConfig.from_env(), republish_after_s=0.0, broker_url=None)
    queue = LocalQueue()
    dispatcher = Dispatcher(store, cfg, queue)
    conninfo = conninfo_of(store)
    keeper = LeaseKeeper(conninfo, cfg.worker_name, cfg.lease_s, cfg.heartbeat_s)
    outcomes: list[Outcome] = []
    try:
        while stop is None or not stop.is_set():
            busy = dispatcher.step()
            if not queue.items:
                if busy:
                    continue  # more of the log to read (a round reads one batch)
                if stop is None and dispatcher.caught_up() and not _running_elsewhere(store):
                    break
                if stop is None:
                    time.sleep(cfg.poll_s)
                    continue
                dispatcher.wait(stop)
                continue
            batch, queue.items = queue.items, []
            for _, event_id in batch:
                outcomes.append(_execute_with_retries(store, event_id, keeper, cfg, conninfo))
    finally:
        keeper.stop()
    return outcomes


def _running_elsewhere(store: EventStore) -> bool:
    """Another process holds a live lease: wait for it (or for the lease to expire)."""
    row = store.conn.execute(
        "SELECT EXISTS (SELECT 1 FROM fleet_tasks WHERE finished_at IS NULL AND state = 'running')"
    ).fetchone()
    return bool(row and row[0])


def _execute_with_retries(store: EventStore, event_id: str, keeper: LeaseKeeper, cfg: FleetConfig,
                          conninfo: str) -> Outcome:
    for retry in range(cfg.max_transient_retries + 1):
        try:
            return execute(store, event_id, keeper, cfg.durable_close_after_s)
        except TransientTaskError as exc:
            if isinstance(exc, AttemptInterrupted):
                release_lease(conninfo, event_id, exc.attempt, keeper.worker, str(exc))
            if store.conn.closed:
                raise
            log.warning("transient error on %s, retry %d: %s", event_id, retry + 1, exc)
            time.sleep(cfg.backoff(retry))
    return Outcome("skipped", detail="transient errors outlasted the retries; the task stays queued")
