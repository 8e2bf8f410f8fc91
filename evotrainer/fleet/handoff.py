"""The requester's own hand-off: a task reaches the broker without waiting for the dispatcher.

A process that requests a task and is configured with a broker (EVOTRAINER_BROKER_URL)
records the task's hand-off row in the transaction that appends its TaskRequested, marked
as being published by it (published_at, the outbox's publishing lease). Once that
transaction has committed it publishes the message itself and marks the row published.
The dispatcher, which would otherwise have to wake, read the log, record the row, take it
and publish it (some eight round trips in two processes), only catches what this misses:

- the broker refused the message: the row is made due at once, and the dispatcher
  publishes it as soon as the broker is back;
- the requester died between its commit and the publish: the row is published by the
  dispatcher once the publishing lease (outbox.PUBLISHING_LEASE_S) has run out, as for
  a dispatcher that died mid-publish. A crash delays the task; it never loses it.

The row is in the database before the message is sent, so the worker that takes the
message always finds a row to claim. Every path can still deliver a task twice, which
the lease makes harmless (see outbox.py).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from contextlib import nullcontext
from typing import Any

import psycopg

from evotrainer.fleet.config import QUEUES, FleetConfig
from evotrainer.fleet.errors import BrokerUnavailableError
from evotrainer.fleet.leases import record_handoffs
from evotrainer.store.records import StoredEvent

log = logging.getLogger(__name__)

# After the broker refused a message, requests leave publishing to the dispatcher for this
# long: a requester does not wait out the broker's retries on every request while it is down.
BROKER_DOWN_PAUSE_S = 30.0


class DirectHandOff:
    """One process's publisher for the tasks it requests, made on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._publisher: Any = None
        self._made_for: tuple[int, str | None, str | None] | None = None
        self._paused_until = 0.0

    def available(self) -> bool:
        """Whether requests in this process publish their own messages now: a broker is
        configured and it has not refused a message in the last BROKER_DOWN_PAUSE_S."""
        return bool(os.environ.get("EVOTRAINER_BROKER_URL")) and time.monotonic() >= self._paused_until

    def record(self, conn: psycopg.Connection[Any], event: StoredEvent) -> bool:
        """In the request's transaction: record its hand-off row as this requester's to
        publish. False, with nothing recorded: the row exists already (the request was made
        before), or the queue is not the fleet's (the dispatcher refuses it, on the record)."""
        if event.payload["queue"] not in QUEUES:
            return False
        return event.event_id in record_handoffs(conn, [event], being_published=True)

    def publish(self, conn: psycopg.Connection[Any], event: StoredEvent) -> None:
        """After the request's commit: hand the task to the broker and mark it published.
        Never raises for a broker or database fault: the dispatcher catches what this misses."""
        from evotrainer.fleet.outbox import MARK_PUBLISHED, crash_point

        crash_point("requester-before-publish")
        try:
            with self._lock:
                self._publisher_now().publish([(event.payload["queue"], event.event_id)])
        except Exception as exc:  # noqa: BLE001
            # The request is recorded whatever happens here, so nothing may reach the
            # caller as a failure of it: a broker that is down (BrokerUnavailableError), or
            # a publisher that cannot even be made, leaves the task to the dispatcher.
            self._paused_until = time.monotonic() + BROKER_DOWN_PAUSE_S
            level = logging.WARNING if isinstance(exc, BrokerUnavailableError) else logging.ERROR
            log.log(level, "could not hand %s to the broker (%s: %s); leaving it to the dispatcher",
                    event.event_id, type(exc).__name__, exc)
            self._leave_to_dispatcher(conn, event)
            return
        try:
            with nullcontext() if conn.autocommit else conn.transaction():
                conn.execute(MARK_PUBLISHED, ([event.event_id],))
        except psycopg.Error as exc:
            # The message is with the broker; a row left "being published" is published
            # again after the lease, a second delivery the lease makes harmless.
            log.warning("published %s but could not mark it (%s)", event.event_id, exc)

    def _leave_to_dispatcher(self, conn: psycopg.Connection[Any], event: StoredEvent) -> None:
        from evotrainer.fleet.outbox import NOTIFY_CHANNEL, UNTAKE

        try:
            with nullcontext() if conn.autocommit else conn.transaction():
                conn.execute(UNTAKE, ([event.event_id],))
                conn.execute(f"NOTIFY {NOTIFY_CHANNEL}")
        except psycopg.Error as exc:
            log.warning("could not hand %s back to the dispatcher (%s); it will take it after the "
                        "publishing lease", event.event_id, exc)

    def _publisher_now(self) -> Any:
        # Made again only in a forked child or for another broker or prefix: the
        # environment is read, not parsed into a FleetConfig, on every request.
        made_for = (os.getpid(), os.environ.get("EVOTRAINER_BROKER_URL"), os.environ.get("EVOTRAINER_QUEUE_PREFIX"))
        if self._publisher is None or self._made_for != made_for:
            # Imported here: Celery costs a process that never requests a task nothing.
            from workers.app import make_app
            from workers.publisher import CeleryPublisher

            cfg = FleetConfig.from_env()
            self._publisher = CeleryPublisher(make_app(cfg), cfg)
            self._made_for = made_for
        return self._publisher


direct = DirectHandOff()
