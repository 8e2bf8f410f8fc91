"""The controller's tasks through a real broker: run_task waits for a worker's outcome, and
says so in one line when no worker consumes the queue."""

from __future__ import annotations

import os
import socket

import pytest

import tests.fleet.kinds  # noqa: F401  (registers the test kinds here too)
from evotrainer.evolve.tasks import TaskTimeoutError, run_task
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
