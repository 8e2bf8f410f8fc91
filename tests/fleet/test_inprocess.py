"""The fleet without a broker: the same outbox, leases and task code, run in-process."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import threading
import time
import uuid
from datetime import UTC, datetime

import psycopg
import pytest

import tests.fleet.kinds  # noqa: F401  (registers the test kinds)
from evotrainer.errors import NotFoundError
from evotrainer.events import TaskCompleted, TaskFailed, TaskRequested
from evotrainer.fleet.config import FleetConfig
from evotrainer.fleet.errors import TaskInputError
from evotrainer.fleet.execute import _close_and_append, execute
from evotrainer.fleet.inprocess import run_in_process
from evotrainer.fleet.leases import LeaseKeeper
from evotrainer.fleet.listing import list_tasks
from evotrainer.fleet.outbox import BATCH, REAP_EXPIRED, RECORD_BATCH, RESCAN_S, TAKE_FOR_PUBLISHING, Dispatcher
from evotrainer.fleet.registry import TaskSpec, request_task, request_tasks
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore
from evotrainer.store.conninfo import conninfo_of
from evotrainer.store.records import NewEvent, StoredEvent
from tests.conftest import IN_CI

MAIN = BranchRef("exp", "main")
CFG = FleetConfig(lease_s=5, poll_s=0.05)


@pytest.fixture
def exp(store: EventStore) -> EventStore:
    store.create_experiment("exp", {"domain": "math"})
    return store


def outcomes(store: EventStore) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for event in store.read_branch(MAIN):
        if event.type in ("TaskCompleted", "TaskFailed"):
            found.setdefault(event.payload["task_id"], []).append(event.type)
    return found


class _Recorder:
    """A publisher that keeps the event ids it was handed, in order."""

    def __init__(self) -> None:
        self.published: list[str] = []

    def publish(self, items: list[tuple[str, str]]) -> None:
        self.published.extend(event_id for _, event_id in items)


def record_all(store: EventStore) -> Dispatcher:
    """Record every hand-off. Readers see an event only once every older transaction on
    the server has ended, and other tests share the server: wait for that."""
    dispatcher = Dispatcher(store, CFG, _Recorder())
    deadline = time.monotonic() + 60
    while True:
        while dispatcher.record_batch()[0]:
            pass
        if dispatcher.caught_up():
            return dispatcher
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_noop_round_trip_appends_one_completion_on_the_request_branch(exp: EventStore) -> None:
    request = request_task(exp, MAIN, "noop", task_id="t1")
    assert request.payload["queue"] == "control"
    assert [o.state for o in run_in_process(exp, CFG)] == ["completed"]
    done = exp.read_branch(MAIN)[-1]
    assert (done.type, done.idempotency_key, done.causation_id) == ("TaskCompleted", "t1:outcome", request.event_id)
    assert done.payload["attempt"] == 1
    [row] = list_tasks(exp)
    assert (row.task_id, row.state, row.attempts) == ("t1", "completed", 1)
    assert run_in_process(exp, CFG) == []  # nothing left


def test_a_second_delivery_is_skipped_and_records_nothing(exp: EventStore) -> None:
    request = request_task(exp, MAIN, "noop", task_id="t1")
    run_in_process(exp, CFG)
    keeper = LeaseKeeper(conninfo_of(exp), "other:1", 5, 1)
    again = execute(exp, request.event_id, keeper)
    assert (again.state, again.detail) == ("skipped", "already completed")
    assert outcomes(exp) == {"t1": ["TaskCompleted"]}


def test_an_outcome_appended_by_other_means_stands_and_the_worker_records_nothing(exp: EventStore) -> None:
    request = request_task(exp, MAIN, "noop", task_id="h1")
    record_all(exp)
    by_hand = TaskCompleted(task_id="h1", worker="by-hand", attempt=1, outputs={}, duration_s=0.0)
    exp.append(MAIN, [NewEvent.of(by_hand, idempotency_key="h1:outcome")])
    outcome = execute(exp, request.event_id, LeaseKeeper(conninfo_of(exp), "w:1", 5, 1))
    assert (outcome.state, outcome.detail) == ("skipped", "another attempt already recorded the outcome")
    done = [e for e in exp.read_branch(MAIN) if e.type == "TaskCompleted"]
    assert [e.payload["worker"] for e in done] == ["by-hand"]
    # The worker's close was undone with its append; the dispatcher closes the row from the event.
    assert exp.conn.execute("SELECT state FROM fleet_tasks WHERE task_id = 'h1'").fetchone() == ("running",)
    record_all(exp)
    assert exp.conn.execute("SELECT state FROM fleet_tasks WHERE task_id = 'h1'").fetchone() == ("completed",)


def test_a_finished_task_whose_connection_died_is_recorded_on_a_new_one(exp: EventStore) -> None:
    """The work is done and its outcome is keyed: a connection lost while recording it
    costs a reconnect, not the attempt (which used to be thrown away and run again)."""
    request = request_task(exp, MAIN, "test.cut_off", task_id="cut1")
    record_all(exp)
    worker = EventStore.connect(conninfo_of(exp))
    outcome = execute(worker, request.event_id, LeaseKeeper(conninfo_of(exp), "w:1", 5, 1))
    assert worker.conn.closed  # the task did cut its connection
    assert (outcome.state, outcome.attempt) == ("completed", 1)
    done = [e for e in exp.read_branch(MAIN) if e.type == "TaskCompleted"]
    assert [(e.payload["task_id"], e.payload["attempt"], e.payload["outputs"]) for e in done] == [
        ("cut1", 1, {"finished": True})]
    assert exp.conn.execute("SELECT state, attempts FROM fleet_tasks WHERE task_id = 'cut1'").fetchone() == (
        "completed", 1)


def test_domain_events_are_appended_with_the_completion_under_the_task_key(exp: EventStore) -> None:
    request_task(exp, MAIN, "test.chain", task_id="c1")
    run_in_process(exp, CFG)
    types = [(e.type, e.idempotency_key) for e in exp.read_branch(MAIN)][1:]
    assert types == [
        ("TaskRequested", "c1:requested"), ("TaskRequested", "c1:1"), ("TaskCompleted", "c1:outcome"),
        ("TaskCompleted", "c1-next:outcome"),
    ]


def test_a_deterministic_error_is_recorded_once_with_class_message_and_traceback(exp: EventStore) -> None:
    request_task(exp, MAIN, "test.fail", task_id="f1", max_attempts=3)
    assert [o.state for o in run_in_process(exp, CFG)] == ["failed"]
    failed = exp.read_branch(MAIN)[-1]
    assert failed.type == "TaskFailed"
    assert failed.payload["error_class"] == "ValueError"
    assert failed.payload["message"] == "deterministic failure in f1"
    assert "tests/fleet/kinds.py" in failed.payload["traceback"]
    assert failed.payload["retryable"] is False
    assert list_tasks(exp)[0].attempts == 1  # not retried


@pytest.mark.parametrize(("kind", "inputs", "expected"), [
    ("test.sleep", {"seconds": "soon"}, "task m1 (kind test.sleep) has invalid inputs: seconds: Input should be"),
    ("test.sleep", {}, "task m1 (kind test.sleep) has invalid inputs: seconds: Field required"),
    ("noop", {"surprise": 1}, "task m1 (kind noop) has invalid inputs: surprise: Extra inputs are not permitted"),
    ("no.such", {}, "no task function is registered for kind 'no.such'"),
])
def test_a_malformed_request_fails_with_a_clear_message(exp: EventStore, kind: str, inputs: dict, expected: str) -> None:
    exp.append(MAIN, [NewEvent.of(TaskRequested(task_id="m1", kind=kind, queue="rollout", inputs=inputs))])
    run_in_process(exp, CFG)
    failed = exp.read_branch(MAIN)[-1]
    assert failed.type == "TaskFailed"
    assert failed.payload["message"].startswith(expected), failed.payload["message"]
    assert failed.payload["error_class"] == "evotrainer.fleet.errors.TaskInputError"


def test_a_request_for_an_unknown_queue_fails_at_the_dispatcher(exp: EventStore) -> None:
    exp.append(MAIN, [NewEvent.of(TaskRequested(task_id="q1", kind="noop", queue="gpu-farm"))])
    run_in_process(exp, CFG)
    failed = exp.read_branch(MAIN)[-1]
    assert failed.type == "TaskFailed"
    assert "queue 'gpu-farm' is not one of the fleet's queues" in failed.payload["message"]


def test_a_repeated_task_id_names_the_same_work(exp: EventStore) -> None:
    exp.append(MAIN, [NewEvent.of(TaskRequested(task_id="d1", kind="noop", queue="control"))] * 2)
    run_in_process(exp, CFG)
    assert outcomes(exp) == {"d1": ["TaskCompleted"]}


def test_an_expired_lease_is_reaped_and_the_task_runs_again(exp: EventStore) -> None:
    request = request_task(exp, MAIN, "noop", task_id="r1", max_attempts=2)
    dispatcher = record_all(exp)
    # A worker on another host claimed it and vanished: its lease is already over.
    exp.conn.execute(
        "UPDATE fleet_tasks SET state = 'running', attempts = 1, worker = 'gone-host:1',"
        " lease_expires_at = now() - interval '1 second' WHERE event_id = %s", (request.event_id,))
    assert dispatcher.reap() == 1
    assert [o.state for o in run_in_process(exp, CFG)] == ["completed"]
    done = exp.read_branch(MAIN)[-1]
    assert (done.type, done.payload["attempt"]) == ("TaskCompleted", 2)


def test_a_task_held_by_a_dead_process_on_this_host_is_reaped_before_its_lease_ends(exp: EventStore) -> None:
    request = request_task(exp, MAIN, "noop", task_id="k1", max_attempts=2)
    alive = request_task(exp, MAIN, "noop", task_id="k2", max_attempts=2)
    dispatcher = record_all(exp)
    dead = subprocess.Popen(["true"])
    dead.wait()  # its pid is gone (and not reused in the moment this takes)
    for event, holder in ((request, f"{socket.gethostname()}:{dead.pid}"),
                          (alive, f"{socket.gethostname()}:{os.getpid()}")):  # fmt: skip
        exp.conn.execute(
            "UPDATE fleet_tasks SET state = 'running', attempts = 1, worker = %s, heartbeat_at = now(),"
            " lease_expires_at = now() + interval '1 hour' WHERE event_id = %s", (holder, event.event_id))
    # Still heartbeating (as a live worker in another PID namespace would): left alone.
    assert dispatcher.reap() == 0
    exp.conn.execute("UPDATE fleet_tasks SET heartbeat_at = now() - make_interval(secs => %s)",
                     (2 * dispatcher.cfg.heartbeat_s + 1,))
    assert dispatcher.reap() == 1  # silent and gone; not the one this live process holds
    state = dict(exp.conn.execute("SELECT event_id::text, state FROM fleet_tasks").fetchall())
    assert (state[request.event_id], state[alive.event_id]) == ("pending", "running")
    (why,) = exp.conn.execute("SELECT last_error FROM fleet_tasks WHERE event_id = %s", (request.event_id,)).fetchone()
    assert f"its worker {socket.gethostname()}:{dead.pid} is no longer running" in why


def test_a_reaped_task_published_moments_ago_is_published_again_at_once(exp: EventStore) -> None:
    """The reaper's pending row must not read as one another dispatcher is publishing
    (published_at within PUBLISHING_LEASE_S): that made a killed worker's task on Redis
    wait up to 30 s more."""
    recorder = _Recorder()
    dispatcher = Dispatcher(exp, CFG, recorder)
    request = request_task(exp, MAIN, "noop", task_id="r1")
    while not recorder.published:
        dispatcher.step()
    exp.conn.execute(
        "UPDATE fleet_tasks SET state = 'running', attempts = 1, worker = 'gone-host:1', heartbeat_at = now(),"
        " lease_expires_at = now() - interval '1 second' WHERE event_id = %s", (request.event_id,))
    assert dispatcher.reap() == 1
    assert dispatcher.publish_due() == 1
    assert recorder.published == [request.event_id] * 2


def test_the_default_heartbeat_is_at_most_two_seconds() -> None:
    """The reaper takes back a dead local worker's task after two missed beats: a quarter
    of the 60 s lease (15 s) made that 30 s."""
    assert FleetConfig().heartbeat_s == 2.0
    assert FleetConfig(lease_s=4).heartbeat_s == 1.0
    assert FleetConfig(lease_s=60, heartbeat_s=10).heartbeat_s == 10


def test_a_task_whose_every_attempt_was_lost_fails_after_max_attempts(exp: EventStore) -> None:
    request = request_task(exp, MAIN, "noop", task_id="p1", max_attempts=2)
    dispatcher = record_all(exp)
    exp.conn.execute(
        "UPDATE fleet_tasks SET state = 'running', attempts = 2, worker = 'gone-host:1',"
        " lease_expires_at = now() - interval '1 second' WHERE event_id = %s", (request.event_id,))
    dispatcher.reap()
    failed = exp.read_branch(MAIN)[-1]
    assert (failed.type, failed.payload["error_class"]) == ("TaskFailed", "AttemptsExhausted")
    assert "gave up after 2 of 2 allowed attempts" in failed.payload["message"]
    assert run_in_process(exp, CFG) == []


def test_the_reaper_goes_on_past_a_task_whose_outcome_was_appended_by_other_means(exp: EventStore) -> None:
    """The reaper closes tasks inside its own transaction; a close undone because the
    outcome already exists must not abort the others (it runs under a savepoint)."""
    requests = [request_task(exp, MAIN, "noop", task_id=f"x{i}", max_attempts=1) for i in range(3)]
    dispatcher = record_all(exp)
    exp.conn.execute(
        "UPDATE fleet_tasks SET state = 'running', attempts = 1, worker = 'gone-host:1',"
        " lease_expires_at = now() - interval '1 second' WHERE event_id = ANY(%s::uuid[])",
        ([r.event_id for r in requests],))
    by_hand = TaskCompleted(task_id="x1", worker="by-hand", attempt=1, outputs={}, duration_s=0.0)
    exp.append(MAIN, [NewEvent.of(by_hand, idempotency_key="x1:outcome")])
    assert dispatcher.reap() == 3
    assert outcomes(exp) == {"x0": ["TaskFailed"], "x1": ["TaskCompleted"], "x2": ["TaskFailed"]}
    record_all(exp)  # the hand-made outcome closes its row
    states = dict(exp.conn.execute("SELECT task_id, state FROM fleet_tasks").fetchall())
    assert states == {"x0": "failed", "x1": "completed", "x2": "failed"}


def test_a_throttled_dispatcher_rescans_for_due_rows_once_a_second(exp: EventStore) -> None:
    """New requests are published at once; rows that only time makes due (here one put
    back to pending behind the dispatcher's back) wait for the next scan, RESCAN_S on."""
    recorder = _Recorder()
    published = recorder.published
    dispatcher = Dispatcher(exp, CFG, recorder)
    request = request_task(exp, MAIN, "noop", task_id="s1")
    deadline = time.monotonic() + 60
    while not published:
        dispatcher.step(throttle=True)
        assert time.monotonic() < deadline
        time.sleep(0.02)
    exp.conn.execute("UPDATE fleet_tasks SET state = 'pending', published_at = NULL WHERE task_id = 's1'")
    assert dispatcher.step(throttle=True) == 0 and len(published) == 1
    time.sleep(RESCAN_S)
    assert dispatcher.step(throttle=True) == 1
    assert published == [request.event_id] * 2


def test_a_hand_off_published_before_the_server_restarted_is_published_again(exp: EventStore) -> None:
    """A short task's claim and outcome may be lost in a crash of the server after its
    message was acknowledged: what was published before the server last started goes out
    again, rather than after republish_after_s."""
    recorder = _Recorder()
    published = recorder.published
    # (Not by republish_after_s: the server may have been up for longer than any setting.)
    dispatcher = Dispatcher(exp, dataclasses.replace(CFG, republish_after_s=1e9), recorder)
    before, after = (request_task(exp, MAIN, "noop", task_id=name) for name in ("before", "after"))
    record_all(exp)
    assert dispatcher.publish_due() == 2 and dispatcher.publish_due() == 0
    exp.conn.execute("UPDATE fleet_tasks SET published_at = pg_postmaster_start_time() - interval '1 second'"
                     " WHERE task_id = 'before'")
    assert dispatcher.publish_due() == 1
    assert published == [before.event_id, after.event_id, before.event_id]


def test_a_dispatcher_publishes_each_batch_it_reads_and_idles_on_outcomes(exp: EventStore) -> None:
    """The first tasks of a large request reach the broker before the rest are even
    recorded; outcomes alone (a fleet at work appends one per task) do not keep the
    dispatcher busy, though it reads them (one appended by hand closes its task)."""
    recorder = _Recorder()
    published = recorder.published
    dispatcher = Dispatcher(exp, CFG, recorder)
    count = RECORD_BATCH + BATCH
    exp.append(MAIN, [NewEvent.of(TaskRequested(task_id=f"b{i}", kind="noop", queue="control"),
                                  idempotency_key=f"b{i}:requested") for i in range(count)])
    deadline = time.monotonic() + 60
    while not published:
        assert time.monotonic() < deadline
        dispatcher.step(throttle=True)
    recorded = exp.conn.execute("SELECT count(*) FROM fleet_tasks").fetchone()[0]  # type: ignore[index]
    assert len(published) == BATCH and recorded < count
    while len(published) < count:
        assert time.monotonic() < deadline
        dispatcher.step(throttle=True)
    exp.append(MAIN, [NewEvent.of(TaskCompleted(task_id=f"b{i}", worker="by hand", attempt=1, duration_s=0),
                                  idempotency_key=f"b{i}:outcome") for i in range(3)])
    while not dispatcher.caught_up():
        assert time.monotonic() < deadline
        assert dispatcher.step(throttle=True) == 0
    states = exp.conn.execute("SELECT state, count(*) FROM fleet_tasks GROUP BY state ORDER BY state").fetchall()
    assert states == [("completed", 3), ("published", count - 3)]


def _wal_syncs(store: EventStore) -> int:
    """How often the server has flushed its write-ahead log to disk, this connection's
    own flushes counted up to now (its statistics are otherwise reported lazily)."""
    store.conn.execute("SELECT pg_stat_force_next_flush()")
    return store.conn.execute("SELECT wal_sync FROM pg_stat_wal").fetchone()[0]  # type: ignore[index]


def test_a_short_attempt_records_its_outcome_without_waiting_for_the_disk(exp: EventStore) -> None:
    """Attempts shorter than durable_close_after_s leave the flush to the WAL writer (a
    few hundred milliseconds later); with 0 every outcome waits for its own, and so does
    a task's last allowed attempt (undone, the reaper would record it as exhausted)."""
    fsync, method, counted = exp.conn.execute(
        "SELECT current_setting('fsync'), current_setting('wal_sync_method'),"
        " to_regproc('pg_stat_force_next_flush') IS NOT NULL AND EXISTS (SELECT FROM pg_attribute"
        "  WHERE attrelid = 'pg_stat_wal'::regclass AND attname = 'wal_sync')").fetchone()  # type: ignore[misc]
    if fsync != "on" or method not in ("fdatasync", "fsync", "fsync_writethrough") or not counted:
        why = f"pg_stat_wal does not count this server's flushes (fsync={fsync}, {method}, {counted})"
        if IN_CI:  # CI's server counts them: a change there must not silently drop this test
            pytest.fail(why)
        pytest.skip(why)
    keeper = LeaseKeeper(conninfo_of(exp), "w:1", 5, 1)
    tasks = 40

    def flushes(prefix: str, durable_after_s: float, max_attempts: int = 3) -> int:
        requests = [request_task(exp, MAIN, "noop", task_id=f"{prefix}{i}", max_attempts=max_attempts)
                    for i in range(tasks)]
        record_all(exp)
        before = _wal_syncs(exp)
        for request in requests:
            assert execute(exp, request.event_id, keeper, durable_after_s).state == "completed"
        return _wal_syncs(exp) - before

    # Generous: the WAL writer, a checkpoint or a heartbeat may flush in between.
    assert flushes("short", durable_after_s=0.1) <= tasks // 2
    assert flushes("durable", durable_after_s=0.0) >= tasks
    assert flushes("last", durable_after_s=0.1, max_attempts=1) >= tasks
    assert list(outcomes(exp).values()) == [["TaskCompleted"]] * 3 * tasks


def test_the_dispatchers_scans_use_the_open_task_index(exp: EventStore) -> None:
    """Closed tasks pile up forever: publishing and reaping must not read them."""
    exp.conn.execute("SET enable_seqscan = off")
    try:
        for query, params in (
            (TAKE_FOR_PUBLISHING, {"lease_s": 30, "republish_s": 60, "batch": 50}),
            (REAP_EXPIRED, {"here": "vm:%", "silent_s": 30}),
        ):
            plan = exp.conn.execute(f"EXPLAIN {query}", params).fetchall()
            assert "ix_fleet_tasks_open_requested_at" in str(plan), plan
    finally:
        exp.conn.execute("RESET enable_seqscan")


def test_a_live_lease_makes_a_duplicate_delivery_drop_its_copy(exp: EventStore) -> None:
    request = request_task(exp, MAIN, "noop", task_id="l1")
    record_all(exp)
    exp.conn.execute(
        "UPDATE fleet_tasks SET state = 'running', attempts = 1, worker = 'busy-host:1',"
        " lease_expires_at = now() + interval '1 hour' WHERE event_id = %s", (request.event_id,))
    keeper = LeaseKeeper(conninfo_of(exp), "me:2", 5, 1)
    assert execute(exp, request.event_id, keeper).detail == "attempt 1 is running on busy-host:1"


def test_the_heartbeat_keeps_a_long_task_leased(exp: EventStore) -> None:
    request_task(exp, MAIN, "test.sleep", task_id="s1", inputs={"seconds": 2.5})
    cfg = FleetConfig(lease_s=1.0, heartbeat_s=0.2, poll_s=0.05)
    seen: list[tuple[str, bool]] = []
    watcher = EventStore.connect(conninfo_of(exp))

    def watch(stop: threading.Event) -> None:
        while not stop.wait(0.3):
            row = watcher.conn.execute("SELECT state, lease_expires_at > now() FROM fleet_tasks").fetchone()
            if row:
                seen.append(row)

    stop = threading.Event()
    thread = threading.Thread(target=watch, args=(stop,))
    thread.start()
    try:
        assert [o.state for o in run_in_process(exp, cfg)] == ["completed"]
    finally:
        stop.set()
        thread.join()
        watcher.close()
    running = [leased for state, leased in seen if state == "running"]
    assert running and all(running), seen


def test_tasks_lists_requests_the_dispatcher_has_not_seen(exp: EventStore) -> None:
    request_task(exp, MAIN, "noop", task_id="n1")
    [row] = list_tasks(exp)
    assert (row.state, row.attempts, row.worker) == ("requested", 0, None)




def test_the_dispatcher_records_hand_offs_in_its_checkpoint_transaction(exp: EventStore) -> None:
    request_task(exp, MAIN, "noop", task_id="h1")
    record_all(exp)
    with psycopg.connect(conninfo_of(exp)) as conn:
        state = conn.execute("SELECT state, publish_count FROM fleet_tasks").fetchone()
        position = conn.execute("SELECT position FROM subscriptions").fetchone()
    assert state == ("pending", 0) and position[0] > 0


class _SlowPublisher:
    """Holds the dispatcher inside its publishing transaction until released."""

    def __init__(self) -> None:
        self.publishing = threading.Event()
        self.release = threading.Event()

    def publish(self, items: list[tuple[str, str]]) -> None:
        self.publishing.set()
        assert self.release.wait(30)


def test_a_worker_does_not_wait_for_a_dispatcher_still_publishing(exp: EventStore, database_url: str) -> None:
    """The publishing transaction's row lock does not block a claim, and a task claimed and
    finished meanwhile is not set back to published when that transaction ends."""
    request = request_task(exp, MAIN, "noop", task_id="t1")
    publisher = _SlowPublisher()
    with EventStore.connect(database_url) as dispatcher_store:
        dispatcher = Dispatcher(dispatcher_store, CFG, publisher)
        deadline = time.monotonic() + 60
        while dispatcher.record_batch()[1] == 0 and not dispatcher.caught_up():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        publishing = threading.Thread(target=dispatcher.publish_due)
        publishing.start()
        assert publisher.publishing.wait(30)
        with EventStore.connect(database_url) as worker_store:
            worker_store.conn.execute("SET statement_timeout = '5s'")  # a wait on the lock would fail here
            keeper = LeaseKeeper(conninfo_of(worker_store), "worker:1", 5, 1)
            assert execute(worker_store, request.event_id, keeper).state == "completed"
        publisher.release.set()
        publishing.join()
    [row] = list_tasks(exp)
    assert (row.state, row.attempts) == ("completed", 1)


class _RecordingPublisher:
    def __init__(self) -> None:
        self.published: list[str] = []
        self.lock = threading.Lock()

    def publish(self, items: list[tuple[str, str]]) -> None:
        time.sleep(0.2)  # long enough for the other dispatcher to look at the same rows
        with self.lock:
            self.published += [event_id for _, event_id in items]


def test_two_dispatchers_publish_each_task_once(exp: EventStore, database_url: str) -> None:
    for i in range(5):
        request_task(exp, MAIN, "noop", task_id=f"t{i}")
    record_all(exp)
    publisher = _RecordingPublisher()
    with EventStore.connect(database_url) as one, EventStore.connect(database_url) as two:
        threads = [threading.Thread(target=Dispatcher(s, CFG, publisher).publish_due) for s in (one, two)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert sorted(publisher.published) == sorted(set(publisher.published)) and len(publisher.published) == 5
    counts = exp.conn.execute("SELECT state, publish_count FROM fleet_tasks").fetchall()
    assert counts == [("published", 1)] * 5


def test_a_close_on_a_branch_that_is_gone_is_undone(store: EventStore) -> None:
    """evotrainer_fleet_close() raises EV002 when its append finds no branch row (one
    cached from a transaction that rolled back): the task's row is not closed either."""
    with pytest.raises(RuntimeError), store.transaction():
        store.create_experiment("ghost")
        store.branch(BranchRef("ghost", "main"))  # cached, never committed
        raise RuntimeError("rolled back")
    event_id = str(uuid.uuid4())
    store.conn.execute(
        "INSERT INTO fleet_tasks (event_id, experiment, branch, task_id, kind, queue, max_attempts, requested_at,"
        " state, attempts) VALUES (%s, 'ghost', 'main', 'g1', 'noop', 'control', 3, now(), 'running', 1)",
        (event_id,))
    request = StoredEvent(1, 1, event_id, "ghost", "main", 2, "TaskRequested", 2,
                          {"task_id": "g1", "kind": "noop", "queue": "control"}, None, None, "g1:requested",
                          "test", datetime.now(UTC), "0" * 64, "0" * 64)
    failed = TaskFailed(task_id="g1", worker="w", attempt=1, error_class="X", message="m", retryable=False)
    with pytest.raises(NotFoundError, match="no branch ghost/main"):
        _close_and_append(store, request, 1, "failed", "m", [NewEvent.of(failed, idempotency_key="g1:outcome")])
    assert store.conn.execute("SELECT state FROM fleet_tasks WHERE task_id = 'g1'").fetchone() == ("running",)


def _run_dispatcher(store: EventStore, cfg: FleetConfig, publisher: _Recorder, database_url: str
                    ) -> tuple[Dispatcher, threading.Event, threading.Thread]:
    dispatcher = Dispatcher(store, cfg, publisher)
    stop = threading.Event()
    thread = threading.Thread(target=dispatcher.run, args=(stop, lambda: EventStore.connect(database_url)),
                              daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not dispatcher._listening:  # its first rounds are over and it waits for notifications
        if time.monotonic() > deadline or not thread.is_alive():
            _stop_dispatcher(stop, thread, database_url)
            pytest.fail("the dispatcher never started waiting for notifications")
        time.sleep(0.01)
    return dispatcher, stop, thread


def _stop_dispatcher(stop: threading.Event, thread: threading.Thread, database_url: str) -> None:
    stop.set()
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("NOTIFY evotrainer_fleet")  # cut its wait short
    thread.join(30)
    assert not thread.is_alive()


def test_a_notified_request_behind_an_older_transaction_is_published_as_soon_as_it_ends(
    exp: EventStore, database_url: str
) -> None:
    """Readers see an event only once every older transaction has ended, so a notified
    request can be committed and still unreadable. The dispatcher then looks again within
    milliseconds, backing off, instead of waiting out its poll interval (30 s here)."""
    publisher = _Recorder()
    with EventStore.connect(database_url) as store, psycopg.connect(database_url) as older:
        older.execute("SELECT pg_current_xact_id()")  # an open transaction, older than the request
        _, stop, thread = _run_dispatcher(store, FleetConfig(lease_s=5, poll_s=30.0), publisher, database_url)
        try:
            request = request_task(exp, MAIN, "noop", task_id="late")  # notifies
            time.sleep(0.3)
            assert publisher.published == []  # committed, not readable yet
            older.rollback()
            ended = time.monotonic()
            while request.event_id not in publisher.published and time.monotonic() - ended < 10:
                time.sleep(0.01)
            assert request.event_id in publisher.published
            assert time.monotonic() - ended < 5
        finally:
            _stop_dispatcher(stop, thread, database_url)


def test_request_tasks_requests_many_in_one_transaction_all_or_none_and_idempotently(exp: EventStore) -> None:
    specs = [TaskSpec("noop", f"m{i}") for i in range(3)]
    first = request_tasks(exp, MAIN, specs)
    assert [e.payload["task_id"] for e in first] == ["m0", "m1", "m2"]
    assert len({e.transaction_id for e in first}) == 1
    again = request_tasks(exp, MAIN, specs)  # requesting again appends nothing
    assert [e.event_id for e in again] == [e.event_id for e in first]
    head = exp.head(MAIN)
    with pytest.raises(TaskInputError, match="no task function is registered for kind 'no-such-kind'"):
        request_tasks(exp, MAIN, [TaskSpec("noop", "m3"), TaskSpec("no-such-kind", "m4")])
    assert exp.head(MAIN) == head  # nothing of a refused batch is written
    run_in_process(exp, CFG)
    assert outcomes(exp) == {f"m{i}": ["TaskCompleted"] for i in range(3)}
