"""The transactional outbox: TaskRequested events handed to the broker, none lost.

The dispatcher follows the event log with a Subscription. For each TaskRequested it
records a `pending` hand-off row in the same transaction that moves its checkpoint, so
a request is either recorded and the position past it, or neither. Publishing happens
after that commit, which is the crash window: a row stays `pending` until the broker
has accepted its message, and whoever runs next (this dispatcher restarted, or another
one) publishes it again, at once or, if it died while publishing the row's batch, after
PUBLISHING_LEASE_S. A hand-off published but never started is re-published after
`republish_after_s` (doubling); the reaper turns expired leases back into `pending`.
Every path can deliver a task twice, never zero times; the lease and the outcome's
idempotency key make the second delivery harmless.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any, Protocol

import psycopg

from evotrainer.fleet import leases
from evotrainer.fleet.config import QUEUES, FleetConfig
from evotrainer.fleet.errors import BrokerUnavailableError, TaskInputError
from evotrainer.fleet.execute import TRANSIENT_DB_ERRORS, record_exhausted, record_failure
from evotrainer.store import sql
from evotrainer.store.eventstore import EventStore
from evotrainer.store.records import StoredEvent
from evotrainer.store.subscription import Subscription

log = logging.getLogger(__name__)

SUBSCRIPTION = "evotrainer-fleet-dispatcher"
# Hand-offs taken for publishing at a time.
BATCH = 50
# Events read from the log per round: a round publishes what it recorded before reading
# on, so the first tasks of a large request reach the broker without waiting for the
# hand-offs of all the others.
RECORD_BATCH = 100
# A dispatcher takes a batch in a short transaction of its own and publishes after it
# commits, so no row stays locked while the broker is talked to: a worker that already
# got its message claims the task at once. On a pending row, published_at then means
# "being published since"; other dispatchers leave the row alone for PUBLISHING_LEASE_S,
# after which its dispatcher is presumed dead mid-publish and the row is published again
# (a second delivery, which the lease makes harmless).
PUBLISHING_LEASE_S = 30.0
TAKE_FOR_PUBLISHING = f"""
UPDATE fleet_tasks SET published_at = now()
 WHERE event_id IN (
     SELECT event_id FROM fleet_tasks
      WHERE finished_at IS NULL  -- the open tasks' index (migration 0007), in request order
        AND ((state = 'pending'
              AND (published_at IS NULL OR published_at < now() - make_interval(secs => %(lease_s)s)))
             OR (state = 'published' AND (published_at < now() - make_interval(secs =>
                 %(republish_s)s * power(2, least(greatest(publish_count - 1, 0), 10)))
                 -- Published before the server last started: a short task's outcome (and its
                 -- claim) may have been lost in the crash after its message was acknowledged.
                 -- (A crash the postmaster survives, or a failover, keeps its start time:
                 -- such a task waits for republish_s.)
                 OR published_at < pg_postmaster_start_time())))
      ORDER BY requested_at LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
RETURNING event_id::text, queue, requested_at, {sql.ASYNC_COMMIT}
"""
# Running tasks whose lease expired (their worker vanished), and those held by a worker on
# this host (worker names are HOST:PID) that missed two heartbeats: whether that process
# still exists is known here without waiting for the rest of its lease
# (leases.holder_is_gone). The missed heartbeats are what make that safe: a live worker in
# another PID namespace with the same host name (a container on the host network) looks
# dead by its PID, but it still renews its lease. Only rows that may be reaped are locked:
# live workers' heartbeats never wait on the reaper. LIKE's wildcards in the host name are
# escaped by the caller.
REAP_EXPIRED = """
SELECT event_id::text, attempts, max_attempts, worker, lease_expires_at < now() FROM fleet_tasks
 WHERE finished_at IS NULL AND state = 'running'
   AND (lease_expires_at < now()
        OR (worker LIKE %(here)s AND heartbeat_at < now() - make_interval(secs => %(silent_s)s)))
   FOR UPDATE SKIP LOCKED
"""
# Only rows still waiting for a worker: one may have been claimed, or even finished,
# while the batch was being published.
# Taken for publishing, but the broker refused: pending rows are due again at once.
UNTAKE = "UPDATE fleet_tasks SET published_at = NULL WHERE event_id = ANY(%s::uuid[]) AND state = 'pending'"
MARK_PUBLISHED = f"""
UPDATE fleet_tasks SET state = 'published', publish_count = publish_count + 1
 WHERE event_id = ANY(%b::uuid[]) AND state IN ('pending', 'published')
RETURNING {sql.ASYNC_COMMIT}
"""
# The outbox's own rows commit asynchronously: a crash of the server can only lose the
# newest of them, and each loss leads to a second delivery, never to none. A lost
# hand-off row goes with the subscription checkpoint that covered its request (so it is
# recorded again); a lost "taken" or "published" mark lets the row be published again.
# The log is flushed in order, so whatever later commit is durable makes these durable.
#
# Scans that only find work as time passes (re-publishing rows nobody started, the
# reaper's expired leases) run at most this often when nothing new was recorded.
RESCAN_S = 1.0
# request_task() notifies this channel when its transaction commits, so the dispatcher
# wakes at once instead of at its next poll; requests appended any other way are found
# by polling. (A NOTIFY trigger on events would catch every append, but the events table
# belongs to the store, and one notification per append costs writers that never
# request work.)
NOTIFY_CHANNEL = "evotrainer_fleet"


class Publisher(Protocol):
    """Hands (fleet queue, TaskRequested event id) pairs to the broker; raises
    BrokerUnavailableError when it cannot. Returning means the broker has them."""

    def publish(self, items: Sequence[tuple[str, str]]) -> None: ...


def crash_point(name: str) -> None:
    """Fault injection for the crash tests: SIGKILL this process at a named point when
    EVOTRAINER_FLEET_CRASH_AT names it, exactly as an OOM kill or power loss would."""
    if os.environ.get("EVOTRAINER_FLEET_CRASH_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


def record_handoffs(conn: psycopg.Connection[Any], events: list[StoredEvent]) -> int:
    """Subscription handler: hand-off rows for requests, closed rows for outcomes that
    were appended by someone other than a worker (they are already closed otherwise)."""
    requests = [e for e in events if e.type == "TaskRequested"]
    if requests:
        leases.record_handoffs(conn, requests)
    closed = [e for e in events if e.type in ("TaskCompleted", "TaskFailed")]
    if closed:
        # Outcomes appended by a worker closed their row already and match nothing here.
        conn.execute(
            "UPDATE fleet_tasks t SET state = c.state, finished_at = c.finished_at, lease_expires_at = NULL"
            "  FROM unnest(%b::text[], %b::timestamptz[], %b::text[], %b::text[], %b::text[])"
            "       AS c(state, finished_at, experiment, branch, task_id)"
            " WHERE (t.experiment, t.branch, t.task_id) = (c.experiment, c.branch, c.task_id)"
            "   AND t.state IN ('pending', 'published', 'running')",
            [["completed" if e.type == "TaskCompleted" else "failed" for e in closed], [e.recorded_at for e in closed],
             [e.experiment for e in closed], [e.branch for e in closed], [e.payload["task_id"] for e in closed]],
        )
    return len(requests)


class Dispatcher:
    """Records hand-offs, publishes them, and requeues tasks whose lease expired."""

    def __init__(self, store: EventStore, cfg: FleetConfig, publisher: Publisher) -> None:
        self.store = store
        self.cfg = cfg
        self.publisher = publisher
        self.subscription = Subscription(store, SUBSCRIPTION, durable=False)
        self._listening = False
        self._publish_again = False
        self._next_publish_scan = 0.0
        self._next_reap = 0.0

    def wait(self, stop: threading.Event, timeout: float | None = None) -> None:
        """Sleep until a request is notified, `stop` is set, or `timeout` (poll_s) has passed."""
        timeout = self.cfg.poll_s if timeout is None else timeout
        conn = self.store.conn
        if not conn.autocommit:
            stop.wait(timeout)
            return
        if not self._listening:
            conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
            self._listening = True
        for _ in conn.notifies(timeout=timeout, stop_after=1):
            pass

    def record_batch(self) -> tuple[int, int]:
        """Follow the log by one batch of at most RECORD_BATCH events; returns how many
        events were read and how many of them were requests."""
        requests = 0

        def handle(conn: psycopg.Connection[Any], events: list[StoredEvent]) -> None:
            nonlocal requests
            requests += record_handoffs(conn, events)

        handled = self.subscription.process(handle, limit=RECORD_BATCH)
        return handled, requests

    def caught_up(self) -> bool:
        """Whether every event committed so far has been through `record_batch`. Readers
        only see an event once every older transaction has ended, so an event can exist for
        a moment before it may be read."""
        return self.subscription.position() >= self.store.last_position()

    def publish_due(self) -> int:
        """Publish pending hand-offs, and published ones nobody started for too long."""
        conn = self.store.conn
        # One statement, a transaction of its own on the store's autocommit connection (and
        # one made explicit on any other): no row stays locked while publishing.
        with nullcontext() if conn.autocommit else conn.transaction():
            rows = conn.execute(TAKE_FOR_PUBLISHING, {
                "lease_s": PUBLISHING_LEASE_S, "republish_s": self.cfg.republish_after_s, "batch": BATCH,
            }).fetchall()
        if not rows:
            return 0
        rows.sort(key=lambda row: row[2])  # oldest request first
        good = [(queue, event_id) for event_id, queue, _, _ in rows if queue in QUEUES]
        if good:
            ids = [event_id for _, event_id in good]
            try:
                self.publisher.publish(good)
            except BrokerUnavailableError:
                conn.execute(UNTAKE, (ids,))
                raise
            with nullcontext() if conn.autocommit else conn.transaction():
                conn.execute(MARK_PUBLISHED, (ids,))
        for event_id, queue, _, _ in rows:
            if queue not in QUEUES:
                self._refuse(event_id, queue)
        return len(rows)

    def _refuse(self, event_id: str, queue: str) -> None:
        error = TaskInputError(f"queue {queue!r} is not one of the fleet's queues ({', '.join(QUEUES)})")
        record_failure(self.store, self.store.get_event(event_id), 0, "dispatcher", error)

    def reap(self) -> int:
        """Requeue running tasks whose worker vanished (its lease expired, or it was a
        process on this host that no longer exists and missed two heartbeats); give up with
        TaskFailed on those that have used every allowed attempt."""
        conn = self.store.conn
        here = socket.gethostname().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + ":%"
        with conn.transaction():
            rows = [(event_id, attempts, max_attempts, worker, expired)
                    for event_id, attempts, max_attempts, worker, expired
                    in conn.execute(REAP_EXPIRED, {"here": here, "silent_s": 2 * self.cfg.heartbeat_s})
                    # A task this very process runs counts as alive (holder_is_gone's rule).
                    if expired or leases.holder_is_gone(worker, {event_id}, event_id)]  # fmt: skip
            for event_id, attempts, max_attempts, worker, expired in rows:
                why = (f"attempt {attempts} lost: the lease of {worker} expired without a heartbeat" if expired
                       else f"attempt {attempts} lost: its worker {worker} is no longer running")  # fmt: skip
                log.warning("%s: %s", event_id, why)
                conn.execute(
                    "UPDATE fleet_attempts SET outcome = 'lost', ended_at = now(), error = %s"
                    " WHERE event_id = %s AND attempt = %s AND outcome = 'running'",
                    (why, event_id, attempts),
                )
                if attempts >= max_attempts:
                    message = leases.exhausted_message(attempts, max_attempts, why)
                    record_exhausted(self.store, self.store.get_event(event_id),
                                     leases.Claim(False, attempts, message, exhausted=True))
                else:
                    # published_at back to NULL: a pending row published less than
                    # PUBLISHING_LEASE_S ago reads as "being published by another
                    # dispatcher" and would wait out that lease (up to 30 s) first.
                    conn.execute(
                        "UPDATE fleet_tasks SET state = 'pending', worker = NULL, lease_expires_at = NULL,"
                        " published_at = NULL, last_error = %s WHERE event_id = %s",
                        (why, event_id),
                    )
        return len(rows)

    def step(self, throttle: bool = False) -> int:
        """One round; returns how much it did (0: idle). With `throttle`, publishing
        runs only after new requests were recorded, after a full batch (more may be
        due) or RESCAN_S after the last scan, and the reaper every RESCAN_S: a busy
        dispatcher does not spend two statements a round on scans that find nothing."""
        handled, requests = self.record_batch()
        if requests:
            crash_point("dispatcher-before-publish")
        # Busy when requests came in or the batch was full (more of the log is waiting).
        # Outcomes alone do not count: a fleet at work appends them all the time, and
        # chasing each one would cost a few statements per task for nothing.
        done = requests or (handled if handled >= RECORD_BATCH else 0)
        now = time.monotonic()
        if not throttle or requests or self._publish_again or now >= self._next_publish_scan:
            published = self.publish_due()
            self._publish_again = published >= BATCH
            self._next_publish_scan = now + RESCAN_S
            done += published
        if not throttle or now >= self._next_reap:
            reaped = self.reap()
            self._next_reap = now + RESCAN_S
            self._publish_again = self._publish_again or reaped > 0
            done += reaped
        return done

    def run(self, stop: threading.Event, reconnect: Callable[[], EventStore]) -> None:
        """Run rounds until `stop` is set, riding out lost connections to Postgres or the broker."""
        failures = 0
        lag_wait = 0.005
        while not stop.is_set():
            try:
                busy = self.step(throttle=True)
                failures = 0
                if busy:
                    lag_wait = 0.005
            except (*TRANSIENT_DB_ERRORS, BrokerUnavailableError) as exc:
                delay = self.cfg.backoff(failures)
                failures += 1
                log.warning("dispatcher round failed (%s: %s); retrying in %.1fs", type(exc).__name__, exc, delay)
                stop.wait(delay)
                if isinstance(exc, TRANSIENT_DB_ERRORS):
                    self._reconnect(reconnect)
                continue
            if not busy:
                try:
                    if self.caught_up():
                        lag_wait = 0.005
                        self.wait(stop)
                    else:
                        # Committed but not yet readable (an older transaction on the
                        # server is still open), or, on a busy fleet, outcomes appended
                        # since the last read: look again soon, backing off to the poll
                        # interval, and at once when a request is notified.
                        self.wait(stop, lag_wait)
                        lag_wait = min(self.cfg.poll_s, lag_wait * 2)
                except TRANSIENT_DB_ERRORS:
                    self._reconnect(reconnect)

    def _reconnect(self, reconnect: Callable[[], EventStore]) -> None:
        try:
            self.store.close()
            self.store = reconnect()
            self.subscription = Subscription(self.store, SUBSCRIPTION, durable=False)
            self._listening = False
        except TRANSIENT_DB_ERRORS as exc:
            log.warning("cannot reconnect to the event store yet: %s", exc)

