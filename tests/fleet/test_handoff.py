"""The requester's own hand-off (evotrainer.fleet.handoff), with a real broker, real
worker and dispatcher processes, and a real requester killed between commit and publish."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

import tests.fleet.kinds  # noqa: F401  (registers the test kinds here too)
from evotrainer.fleet import handoff
from evotrainer.fleet.outbox import PUBLISHING_LEASE_S
from evotrainer.fleet.registry import request_task
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore
from tests.fleet.conftest import ROOT, Fleet

MAIN = BranchRef("exp", "main")


@pytest.fixture
def requester_env(redis_fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> Fleet:
    """This test process requests tasks configured like the fleet (broker and prefix)."""
    for name in ("EVOTRAINER_BROKER_URL", "EVOTRAINER_QUEUE_PREFIX"):
        monkeypatch.setenv(name, redis_fleet.env[name])
    monkeypatch.setattr(handoff, "direct", handoff.DirectHandOff())  # no pause left by another test
    return redis_fleet


def _row(fleet: Fleet, task_id: str) -> tuple[object, ...]:
    return fleet.query("SELECT state, publish_count, published_at IS NULL FROM fleet_tasks WHERE task_id = %s",
                       (task_id,))[0]


@pytest.mark.slow
def test_a_requested_task_runs_with_no_dispatcher_at_all(requester_env: Fleet) -> None:
    fleet = requester_env
    fleet.worker()
    with EventStore.connect(fleet.database_url, actor="test") as store:
        store.create_experiment("exp", {"domain": "math"})
        request_task(store, MAIN, "noop", task_id="d1")
        fleet.wait_finished(["d1"], timeout=120)
        # Requested again: the request exists and so does its row, so nothing is published.
        request_task(store, MAIN, "noop", task_id="d1")
    assert _row(fleet, "d1") == ("completed", 1, False)
    assert [t for t, _ in fleet.outcomes()["d1"]] == ["TaskCompleted"]


@pytest.mark.slow
def test_inside_a_callers_transaction_the_dispatcher_hands_off(requester_env: Fleet) -> None:
    """The commit is the caller's: a message sent before it would reach a worker that
    cannot see the request yet."""
    fleet = requester_env
    with EventStore.connect(fleet.database_url, actor="test") as store:
        store.create_experiment("exp", {"domain": "math"})
        with store.transaction():
            request_task(store, MAIN, "noop", task_id="t1")
    assert fleet.query("SELECT count(*) FROM fleet_tasks") == [(0,)]  # left to the dispatcher
    fleet.worker()
    fleet.dispatcher()
    fleet.wait_finished(["t1"], timeout=120)
    assert _row(fleet, "t1")[:2] == ("completed", 1)


@pytest.mark.slow
def test_a_broker_that_refuses_leaves_the_task_to_the_dispatcher(requester_env: Fleet,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    fleet = requester_env
    monkeypatch.setenv("EVOTRAINER_BROKER_URL", "redis://127.0.0.1:9/0")  # nothing listens there
    with EventStore.connect(fleet.database_url, actor="test") as store:
        store.create_experiment("exp", {"domain": "math"})
        started = time.monotonic()
        request_task(store, MAIN, "noop", task_id="r1")  # recorded; no error reaches the caller
        assert time.monotonic() - started < 30
        assert _row(fleet, "r1") == ("pending", 0, True)  # due for the dispatcher at once
        assert not handoff.direct.available()  # later requests do not wait on the broker again
        request_task(store, MAIN, "noop", task_id="r2")
        # Made while the requester leaves publishing to the dispatcher: no row of its own.
        assert fleet.query("SELECT 1 FROM fleet_tasks WHERE task_id = 'r2'") == []
    fleet.worker()
    fleet.dispatcher()
    fleet.wait_finished(["r1", "r2"], timeout=120)
    assert {t: [k for k, _ in o] for t, o in fleet.outcomes().items()} == {
        "r1": ["TaskCompleted"], "r2": ["TaskCompleted"]}


REQUEST_AND_DIE = """
import tests.fleet.kinds
from evotrainer.fleet.registry import request_task
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore
with EventStore.connect(actor="doomed") as store:
    request_task(store, BranchRef("exp", "main"), "noop", task_id="k1")
"""


@pytest.mark.slow
def test_a_requester_killed_between_commit_and_publish_loses_nothing(requester_env: Fleet) -> None:
    fleet = requester_env
    with EventStore.connect(fleet.database_url, actor="test") as store:
        store.create_experiment("exp", {"domain": "math"})
    doomed = subprocess.run([sys.executable, "-c", REQUEST_AND_DIE], cwd=ROOT, timeout=120,
                            env={**fleet.env, "EVOTRAINER_FLEET_CRASH_AT": "requester-before-publish"})
    assert doomed.returncode == -signal.SIGKILL
    # Committed, and held as being published by a requester that is gone.
    assert _row(fleet, "k1") == ("pending", 0, False)
    fleet.worker()
    fleet.dispatcher()
    time.sleep(2)
    assert _row(fleet, "k1")[0] == "pending"  # the dispatcher respects the publishing lease...
    fleet.query("UPDATE fleet_tasks SET published_at = published_at - make_interval(secs => %s)"
                " WHERE task_id = 'k1' RETURNING 1", (PUBLISHING_LEASE_S,))
    fleet.wait_finished(["k1"], timeout=120)  # ...and publishes the task once it has run out
    assert [t for t, _ in fleet.outcomes()["k1"]] == ["TaskCompleted"]
