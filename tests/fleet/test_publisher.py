"""The dispatcher's hand-off to the broker: what it reports when the broker is away."""

from __future__ import annotations

import time
import uuid

import pytest

from evotrainer.fleet.config import FleetConfig
from evotrainer.fleet.errors import BrokerUnavailableError
from workers.app import make_app
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
