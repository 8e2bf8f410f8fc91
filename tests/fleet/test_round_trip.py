"""Round trips through a real broker (Redis and RabbitMQ) with real worker processes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import tests.fleet.kinds  # noqa: F401  (registers the test kinds here too)
from evotrainer.fleet.registry import request_task
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore
from tests.fleet.conftest import ROOT, Fleet

MAIN = BranchRef("exp", "main")


@pytest.mark.slow
def test_round_trip(any_fleet: Fleet) -> None:
    fleet = any_fleet
    with EventStore.connect(fleet.database_url, actor="test") as store:
        store.create_experiment("exp", {"domain": "math"})
        request_task(store, MAIN, "noop", task_id="n1")
        request_task(store, MAIN, "test.chain", task_id="c1")
        request_task(store, MAIN, "test.sleep", task_id="bad", inputs={"seconds": "soon"})
        request_task(store, MAIN, "test.fail", task_id="f1")
    fleet.dispatcher()
    worker = fleet.worker()
    # A message that is not a TaskRequested event id: dropped with a log line, and the
    # worker goes on with the real tasks.
    _send_garbage(fleet)
    found = fleet.wait_finished(["n1", "c1", "c1-next", "bad", "f1"])
    assert {task: [t for t, _ in events] for task, events in found.items()} == {
        "n1": ["TaskCompleted"], "c1": ["TaskCompleted"], "c1-next": ["TaskCompleted"],
        "bad": ["TaskFailed"], "f1": ["TaskFailed"],
    }
    bad = found["bad"][0][1]
    assert bad["message"].startswith("task bad (kind test.sleep) has invalid inputs: seconds: Input should be"), bad
    assert bad["error_class"] == "evotrainer.fleet.errors.TaskInputError"
    failed = found["f1"][0][1]
    assert (failed["error_class"], failed["message"], failed["attempt"]) == (
        "ValueError", "deterministic failure in f1", 1)
    assert "raise ValueError" in failed["traceback"]
    completed = found["n1"][0][1]
    assert completed["worker"].endswith(f":{worker.pid}")

    listing = subprocess.run([sys.executable, "-m", "evotrainer", "tasks", "--json"], cwd=ROOT,
                             env=fleet.env, capture_output=True, text=True, timeout=60, check=True)
    rows = {row["task_id"]: row for row in json.loads(listing.stdout)}
    assert {t: (r["state"], r["attempts"]) for t, r in rows.items()} == {
        "n1": ("completed", 1), "c1": ("completed", 1), "c1-next": ("completed", 1), "bad": ("failed", 1),
        "f1": ("failed", 1),
    }
    assert rows["n1"]["worker"] == completed["worker"]
    assert "dropping a malformed task message" in (fleet.logs / "worker-1.log").read_text()


def _send_garbage(fleet: Fleet) -> None:
    from celery import Celery

    app = Celery(broker=fleet.env["EVOTRAINER_BROKER_URL"])
    app.conf.broker_transport_options = {"confirm_publish": True} if fleet.broker == "amqp" else {}
    try:
        app.send_task("evotrainer.run_task", args=["not-an-event-id"],
                      queue=fleet.env["EVOTRAINER_QUEUE_PREFIX"] + "control")
    finally:
        app.close()
