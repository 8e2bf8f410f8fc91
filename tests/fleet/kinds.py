"""Task kinds for the fleet's tests, loaded into workers with EVOTRAINER_TASK_MODULES."""

from __future__ import annotations

import os
import signal
import time

from pydantic import BaseModel, ConfigDict, Field

from evotrainer.events import TaskRequested
from evotrainer.fleet.registry import TaskRequest, TaskResult, register_kind
from evotrainer.store.records import NewEvent


class SleepInputs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seconds: float = Field(ge=0)


@register_kind("test.sleep", queue="rollout", inputs=SleepInputs)
def sleep(request: TaskRequest) -> TaskResult:
    time.sleep(request.inputs.seconds)
    return TaskResult(outputs={"slept": request.inputs.seconds, "attempt": request.attempt})


@register_kind("test.fail", queue="diagnose")
def fail(request: TaskRequest) -> TaskResult:
    raise ValueError(f"deterministic failure in {request.task.task_id}")


@register_kind("test.crash", queue="diagnose")
def crash(request: TaskRequest) -> TaskResult:
    """A poison task: kills the process running it, as an OOM kill or a segfault would."""
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


@register_kind("test.chain", queue="control")
def chain(request: TaskRequest) -> TaskResult:
    """Requests a follow-up noop: a task whose results are domain events."""
    follow = TaskRequested(task_id=f"{request.task.task_id}-next", kind="noop", queue="control")
    return TaskResult(events=[NewEvent.of(follow)], outputs={"next": follow.task_id})


@register_kind("test.cut_off", queue="control")
def cut_off(request: TaskRequest) -> TaskResult:
    """Finishes its work, then loses the worker's database connection before the outcome is
    recorded (as a restarted server or a dropped network would do to it)."""
    import psycopg

    from evotrainer.store.conninfo import conninfo_of

    pid = request.store.conn.info.backend_pid
    with psycopg.connect(conninfo_of(request.store), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    return TaskResult(outputs={"finished": True})


@register_kind("test.crash_first_generation", queue="diagnose")
def crash_first_generation(request: TaskRequest) -> TaskResult:
    """Kills the process running it while the task is in its first generation (its id has
    no `-rN` suffix): every attempt is lost, as when workers die, and the same work asked
    for again (evotrainer.evolve.tasks) succeeds."""
    if "-r" not in request.task.task_id:
        os.kill(os.getpid(), signal.SIGKILL)
    return TaskResult(outputs={"generation": request.task.task_id.rpartition("-r")[2]})
