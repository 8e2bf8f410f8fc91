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

    def publish(self, items: Sequence[tuple[str, str]]) -> None:
        try:
            with self.app.producer_or_acquire() as producer:
                for queue, event_id in items:
                    self.app.send_task(TASK_NAME, args=[event_id], queue=self.cfg.broker_queue(queue),
                                       producer=producer, ignore_result=True)
        except (kombu.exceptions.OperationalError, OSError) as exc:
            raise BrokerUnavailableError(f"cannot publish to the broker: {exc}") from exc
