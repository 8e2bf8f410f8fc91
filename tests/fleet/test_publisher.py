"""The dispatcher's hand-off to the broker: what it reports when the broker is away."""

from __future__ import annotations

import time
import uuid

import pytest

from evotrainer.fleet.config import FleetConfig
from evotrainer.fleet.errors import BrokerUnavailableError
from tests.fleet.conftest import BROKERS, purge, require_broker
from workers.app import TASK_NAME, make_app
from workers.publisher import CeleryPublisher


@pytest.mark.parametrize("broker", ["redis://127.0.0.1:1/0", "amqp://guest:guest@127.0.0.1:1//"])
def test_a_broker_that_cannot_be_reached_is_reported_as_unavailable(broker: str) -> None:
    """Nothing listens on loopback port 1: publishing a batch (Redis: one pipeline) must
    end in BrokerUnavailableError, which the dispatcher turns into a retry with the rows
    still pending, never in an exception that kills it or in a silent success."""
    cfg = FleetConfig(broker_url=broker)
    app = make_app(cfg)
    app.conf.broker_transport_options = {**app.conf.broker_transport_options, "max_retries": 1}
    app.conf.task_publish_retry_policy = {"max_retries": 1, "interval_start": 0, "interval_step": 0.1}
    started = time.monotonic()
    with pytest.raises(BrokerUnavailableError, match="cannot publish to the broker"):
        CeleryPublisher(app, cfg).publish([("control", str(uuid.uuid4())), ("train", str(uuid.uuid4()))])
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("broker", sorted(BROKERS))
def test_a_batch_reaches_queues_no_worker_has_declared(broker: str) -> None:
    """The publisher declares each queue of a batch once, itself: on RabbitMQ a message
    published to a queue that does not exist yet would be dropped without an error. The
    messages are the fleet's task (its name, the event id as its one argument)."""
    url = BROKERS[broker]
    require_broker(url)
    prefix = f"evotest-{uuid.uuid4().hex[:10]}-"
    cfg = FleetConfig(broker_url=url, queue_prefix=prefix)
    app = make_app(cfg)
    items = [("control", str(uuid.uuid4())), ("train", str(uuid.uuid4())), ("control", str(uuid.uuid4()))]
    try:
        CeleryPublisher(app, cfg).publish(items)
        received: dict[str, list[str]] = {}
        with app.connection_for_read() as conn:
            for queue in ("control", "train"):
                bound = app.amqp.queues[cfg.broker_queue(queue)](conn.default_channel)
                while (message := bound.get(no_ack=True)) is not None:
                    assert message.headers["task"] == TASK_NAME
                    args, kwargs, _ = message.decode()
                    received.setdefault(queue, []).extend(args)
        assert received == {"control": [items[0][1], items[2][1]], "train": [items[1][1]]}
    finally:
        purge(url, prefix)
        app.close()
