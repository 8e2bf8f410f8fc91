"""Crash safety with real processes on real brokers (mostly Redis: the harder case, since
it re-delivers an unacknowledged message only after its visibility timeout).

Every test asserts on the event log itself: each task has exactly one outcome event.
"""

from __future__ import annotations

import random
import signal
import socket
import time

import pytest

import tests.fleet.kinds  # noqa: F401  (registers the test kinds here too)
from evotrainer.fleet.registry import request_task
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore
from tests.fleet.conftest import Fleet

MAIN = BranchRef("exp", "main")
HOST = socket.gethostname()


def _request(fleet: Fleet, kind: str, task_ids: list[str], **kwargs: object) -> None:
    with EventStore.connect(fleet.database_url, actor="test") as store:
        store.create_experiment("exp", {"domain": "math"})
        for task_id in task_ids:
            request_task(store, MAIN, kind, task_id=task_id, **kwargs)  # type: ignore[arg-type]


def _running_on(fleet: Fleet, pid: int) -> bool:
    return bool(fleet.query("SELECT 1 FROM fleet_tasks WHERE state = 'running' AND worker = %s", (f"{HOST}:{pid}",)))


def _assert_exactly_once(fleet: Fleet, task_ids: list[str], outcome: str = "TaskCompleted") -> None:
    found = fleet.outcomes()
    assert {t: [type_ for type_, _ in found.get(t, [])] for t in task_ids} == {t: [outcome] for t in task_ids}


@pytest.mark.slow
def test_sigkill_a_worker_mid_task_ten_times(any_fleet: Fleet) -> None:
    """On RabbitMQ the killed worker's message comes back at once (its connection
    dropped) and the dead holder's lease is taken over; on Redis it stays unacknowledged
    until the visibility timeout, and the expired lease is what requeues it."""
    fleet = any_fleet
    task_ids = [f"k{i}" for i in range(10)]
    _request(fleet, "test.sleep", task_ids, inputs={"seconds": 1.5}, max_attempts=20)
    fleet.dispatcher()
    rng = random.Random(4)
    for kill in range(10):
        worker = fleet.worker()
        fleet.wait_for(lambda w=worker: _running_on(fleet, w.pid), f"worker {kill} to start a task", timeout=120)
        time.sleep(rng.uniform(0.1, 1.0))  # somewhere in the middle of a 1.5 s task
        worker.send_signal(signal.SIGKILL)
        assert worker.wait(timeout=30) == -signal.SIGKILL
    fleet.worker()
    fleet.wait_finished(task_ids, timeout=240)
    _assert_exactly_once(fleet, task_ids)
    lost = fleet.query("SELECT count(*) FROM fleet_attempts WHERE outcome = 'lost'")[0][0]
    assert lost >= 10, fleet.query("SELECT * FROM fleet_attempts ORDER BY started_at")
    attempts = fleet.query("SELECT sum(attempts) FROM fleet_tasks")[0][0]
    assert attempts >= len(task_ids) + 10


@pytest.mark.slow
def test_dispatcher_killed_between_append_and_publish(redis_fleet: Fleet) -> None:
    fleet = redis_fleet
    _request(fleet, "noop", ["d1"])
    crashed = fleet.dispatcher(env={"EVOTRAINER_FLEET_CRASH_AT": "dispatcher-before-publish"})
    assert crashed.wait(timeout=120) == -signal.SIGKILL
    # The hand-off was recorded (with the checkpoint past the request), never published.
    assert fleet.query("SELECT state, publish_count FROM fleet_tasks") == [("pending", 0)]
    assert fleet.query("SELECT count(*) FROM subscriptions")[0][0] == 1
    fleet.worker()
    fleet.dispatcher()
    fleet.wait_finished(["d1"])
    _assert_exactly_once(fleet, ["d1"])


@pytest.mark.slow
def test_worker_database_connection_terminated_mid_task(redis_fleet: Fleet) -> None:
    fleet = redis_fleet
    _request(fleet, "test.sleep", ["p1"], inputs={"seconds": 3})
    fleet.dispatcher()
    worker = fleet.worker()
    fleet.wait_for(lambda: _running_on(fleet, worker.pid), "the task to start")
    database = fleet.database_url.rsplit("/", 1)[1]
    killed = fleet.query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE datname = %s AND application_name = 'evotrainer-worker'", (database,))
    assert killed and all(ok for (ok,) in killed)
    found = fleet.wait_finished(["p1"])
    _assert_exactly_once(fleet, ["p1"])
    # The work was done when its connection went: recorded on a new one, not run again.
    assert found["p1"][0][1]["attempt"] == 1
    assert fleet.query("SELECT attempt, outcome FROM fleet_attempts ORDER BY attempt") == [(1, "completed")]
    assert worker.poll() is None  # the worker itself carried on


@pytest.mark.slow
def test_poison_task_fails_after_its_allowed_attempts(redis_fleet: Fleet) -> None:
    """A task that kills the process running it (think OOM kill): the prefork pool's
    parent survives, requeues it, and the lease shows each attempt was lost."""
    fleet = redis_fleet
    _request(fleet, "test.crash", ["x1"], max_attempts=2)
    _request_more(fleet, "noop", ["after"])
    fleet.dispatcher()
    fleet.worker("--pool", "prefork", "--concurrency", "1")
    found = fleet.wait_finished(["x1", "after"])
    _assert_exactly_once(fleet, ["x1"], "TaskFailed")
    failed = found["x1"][0][1]
    assert failed["error_class"] == "AttemptsExhausted"
    assert failed["message"].startswith("gave up after 2 of 2 allowed attempts"), failed
    assert fleet.query("SELECT attempt, outcome FROM fleet_attempts f JOIN fleet_tasks t USING (event_id)"
                       " WHERE task_id = 'x1' ORDER BY attempt") == [(1, "lost"), (2, "lost")]
    _assert_exactly_once(fleet, ["after"])


def _request_more(fleet: Fleet, kind: str, task_ids: list[str]) -> None:
    with EventStore.connect(fleet.database_url, actor="test") as store:
        for task_id in task_ids:
            request_task(store, MAIN, kind, task_id=task_id)


@pytest.mark.slow
def test_a_sigkilled_workers_task_runs_again_within_ten_seconds_with_default_leases(any_fleet: Fleet) -> None:
    """With the default lease (60 s) and heartbeat: the task of a worker killed mid-task is
    started again by the other, idle worker within 10 s, on either broker (RabbitMQ hands
    the message back when the connection drops; on Redis it is the reaper, which must see
    two missed heartbeats and publish the task again at once)."""
    fleet = any_fleet
    defaults = {"EVOTRAINER_LEASE_SECONDS": "", "EVOTRAINER_HEARTBEAT_SECONDS": ""}
    fleet.start("dispatcher", env=defaults)
    workers = [fleet.start("worker", "--queues", "rollout", env=defaults) for _ in range(2)]
    for n in (1, 2):
        fleet.wait_for(lambda n=n: " ready." in (fleet.logs / f"worker-{n}.log").read_text(errors="replace"),
                       f"worker {n} to be ready", timeout=120)  # fmt: skip
    _request(fleet, "test.sleep", ["slow"], inputs={"seconds": 20})
    fleet.wait_for(lambda: any(_running_on(fleet, w.pid) for w in workers), "the task to start", timeout=60)
    killed, other = workers if _running_on(fleet, workers[0].pid) else workers[::-1]
    time.sleep(1)
    killed.send_signal(signal.SIGKILL)
    killed_at = fleet.query("SELECT clock_timestamp()")[0][0]
    assert killed.wait(timeout=30) == -signal.SIGKILL
    fleet.wait_for(lambda: _running_on(fleet, other.pid), "the task to start again", timeout=100)
    (started,) = fleet.query("SELECT started_at FROM fleet_attempts WHERE attempt = 2")[0]
    waited = (started - killed_at).total_seconds()
    print(f"{fleet.broker}: the killed worker's task started again after {waited:.1f} s")
    assert waited < 10, waited
    fleet.wait_finished(["slow"], timeout=60)
    _assert_exactly_once(fleet, ["slow"])


@pytest.mark.slow
def test_a_cut_rabbitmq_connection_is_survived_mid_task(amqp_fleet: Fleet) -> None:
    """The worker's and the dispatcher's connections to RabbitMQ are cut (through a proxy
    this test started on loopback) while the worker runs a task: the task is recorded once,
    and both reconnect and carry on with the next request."""
    from tests.fleet.proxy import CuttableProxy

    fleet = amqp_fleet
    host, port = fleet.env["EVOTRAINER_BROKER_URL"].split("@", 1)[1].split("/", 1)[0].split(":")
    proxy = CuttableProxy((host, int(port)))
    through = {"EVOTRAINER_BROKER_URL": proxy.url(fleet.env["EVOTRAINER_BROKER_URL"])}
    try:
        fleet.start("dispatcher", env=through)
        worker = fleet.start("worker", "--queues", "rollout,control", "--loglevel", "info", env=through)
        _request(fleet, "test.sleep", ["during"], inputs={"seconds": 4})
        fleet.wait_for(lambda: _running_on(fleet, worker.pid), "the task to start", timeout=120)
        assert proxy.cut() >= 2  # the worker's (consumer) and the dispatcher's (publisher)
        fleet.wait_finished(["during"], timeout=120)
        _request_more(fleet, "noop", ["after"])
        found = fleet.wait_finished(["during", "after"], timeout=120)
        _assert_exactly_once(fleet, ["during", "after"])
        assert found["after"][0][1]["worker"] == f"{HOST}:{worker.pid}"  # the same worker, reconnected
        assert worker.poll() is None
        assert proxy.accepted > 2  # connections made again after the cut
    finally:
        proxy.close()
