"""The dispatcher's hand-off to Celery: publish (queue, event id) messages, ids only."""

from __future__ import annotations

from collections.abc import Sequence

import kombu.exceptions
from celery import Celery

from evotrainer.fleet.config import FleetConfig
from evotrainer.fleet.errors import BrokerUnavailableError
from workers.app import TASK_NAME


class CeleryPublisher:
    """evotrainer.fleet.outbox.Publisher over a Celery app's broker connection."""

    def __init__(self, app: Celery, cfg: FleetConfig) -> None:
        self.app = app
        self.cfg = cfg
        # What a lost or refused broker connection raises: kombu's own errors, and the
        # transport client's (py-amqp, redis-py), which a declaration outside publish's
        # retry wrapper lets through unwrapped. Not the channel errors: a refused
        # permission or a queue declared with other arguments is a mistake to fix, not
        # an outage to wait out.
        with app.connection_for_write() as conn:
            self._broker_errors: tuple[type[BaseException], ...] = (
                kombu.exceptions.OperationalError, kombu.exceptions.BatchPublishError, OSError,
                *conn.connection_errors)

    def publish(self, items: Sequence[tuple[str, str]]) -> None:
        try:
            # A publish batch sends the messages in one pipeline on brokers that support
            # it (Redis): one round trip for the batch instead of one per message. On the
            # others (RabbitMQ) each message is published at once, as without it. Leaving
            # the batch flushes it, so returning still means the broker has every message.
            with self.app.producer_or_acquire() as producer, producer.batch(max_size=max(1, len(items))):
                # Each queue is declared once per batch (a cached no-op once the
                # connection has declared it), not once per message as send_task would:
                # kombu binds a copy of the queue to the channel for every declaration.
                names = {queue: self.cfg.broker_queue(queue) for queue, _ in items}
                for name in set(names.values()):
                    producer.maybe_declare(self.app.amqp.queues[name], retry=self.app.conf.task_publish_retry,
                                           **(self.app.conf.task_publish_retry_policy or {}))
                for queue, event_id in items:
                    args = [event_id]
                    self.app.send_task(TASK_NAME, args=args, queue=names[queue], producer=producer,
                                       ignore_result=True, declare=[], argsrepr=repr(args), kwargsrepr="{}")
        except self._broker_errors as exc:
            raise BrokerUnavailableError(f"cannot publish to the broker: {exc}") from exc
