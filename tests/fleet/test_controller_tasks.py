"""The controller's tasks through a real broker: run_task waits for a worker's outcome, says
so in one line when no worker consumes the queue, and asks again for work whose workers died."""

from __future__ import annotations

import os
import socket

import pytest

import tests.fleet.kinds  # noqa: F401  (registers the test kinds here too)
from evotrainer.evolve.tasks import TaskTimeoutError, run_task, task_id
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore
from tests.fleet.conftest import Fleet


def test_the_controllers_tasks_go_through_the_broker(redis_fleet: Fleet, store: EventStore,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    for name in ("EVOTRAINER_BROKER_URL", "EVOTRAINER_QUEUE_PREFIX"):
        monkeypatch.setenv(name, redis_fleet.env[name])
    store.create_experiment("via")
    main = BranchRef("via", "main")
    redis_fleet.dispatcher()
    redis_fleet.worker()
    produced = run_task(store, main, "noop", {}, timeout_s=120)
    assert [e.type for e in produced] == ["TaskCompleted"]
    assert produced[0].payload["worker"] != f"{socket.gethostname()}:{os.getpid()}"  # a worker ran it, not this
    again = run_task(store, main, "noop", {}, timeout_s=5)  # the same work: found, not run again
    assert again == produced
    # The fleet's worker does not consume the train queue: nobody runs it, and that is said.
    with pytest.raises(TaskTimeoutError, match="did not finish within 2 s: is a worker consuming its queue"):
        run_task(store, main, "train", {"domain": "math:digit_add", "policy": "tiny"}, timeout_s=2)


@pytest.mark.slow
def test_work_whose_workers_died_every_attempt_is_asked_for_again_in_the_same_call(
    redis_fleet: Fleet, store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its attempts ran out because the workers running it died (the prefork pool's child
    is killed each time): a fault, not a verdict. run_task requests the same work again as
    `-r2` at once and returns its result, instead of raising the loss as the work's failure."""
    for name in ("EVOTRAINER_BROKER_URL", "EVOTRAINER_QUEUE_PREFIX"):
        monkeypatch.setenv(name, redis_fleet.env[name])
    store.create_experiment("lost")
    main = BranchRef("lost", "main")
    redis_fleet.dispatcher()
    redis_fleet.worker("--pool", "prefork", "--concurrency", "1")
    produced = run_task(store, main, "test.crash_first_generation", {}, timeout_s=180)
    first = task_id("test.crash_first_generation", main, {})
    assert [(e.type, e.payload["task_id"]) for e in produced] == [("TaskCompleted", f"{first}-r2")]
    failed = [e.payload for e in store.read_branch(main) if e.type == "TaskFailed"]
    assert [(p["task_id"], p["error_class"]) for p in failed] == [(first, "AttemptsExhausted")]
