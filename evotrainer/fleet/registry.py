"""Which plain function runs each task kind, and how work is requested.

    @register_kind("noop", queue="control")
    def noop(request: TaskRequest) -> TaskResult: ...

A task function receives the request (ids, the typed payload, its validated inputs and
an open store) and returns the domain events to append with the completion, plus
outputs for TaskCompleted. It knows nothing of Celery: the same function runs in a
worker or in-process. Subsystems register their kinds in modules listed in
_BUILTIN_MODULES; EVOTRAINER_TASK_MODULES (comma-separated module names) adds more,
which is how tests and benchmarks plug in kinds of their own.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from evotrainer.events import TaskRequested
from evotrainer.fleet.config import QUEUES
from evotrainer.fleet.errors import TaskInputError
from evotrainer.refs import BranchRef
from evotrainer.store.eventstore import EventStore
from evotrainer.store.records import NewEvent, StoredEvent

# Core modules that register kinds (train, evaluate, diagnose, backtest).
_BUILTIN_MODULES: tuple[str, ...] = ("evotrainer.fleet.builtin",)


@dataclass(frozen=True)
class TaskRequest:
    """What a task function gets: everything is loaded from ids, nothing came by broker."""

    store: EventStore
    event: StoredEvent
    """The TaskRequested event; results go to its branch."""
    task: TaskRequested
    inputs: Any
    """`task.inputs` validated by the kind's input model (a plain dict without one)."""
    attempt: int
    worker: str

    @property
    def ref(self) -> BranchRef:
        return BranchRef(self.event.experiment, self.event.branch)


@dataclass(frozen=True)
class TaskResult:
    """Domain events to append with TaskCompleted, and the completion's outputs."""

    events: list[NewEvent] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)


TaskFunction = Callable[[TaskRequest], TaskResult]


@dataclass(frozen=True)
class TaskKindSpec:
    kind: str
    function: TaskFunction
    queue: str
    inputs_model: type[BaseModel] | None = None


_kinds: dict[str, TaskKindSpec] = {}
_loaded = False


def register_kind(
    kind: str, queue: str, inputs: type[BaseModel] | None = None
) -> Callable[[TaskFunction], TaskFunction]:
    """Decorator: run `function` for requests of `kind`, routed to `queue`."""
    if queue not in QUEUES:
        raise ValueError(f"queue {queue!r} is not one of the fleet's queues {QUEUES}")

    def decorate(function: TaskFunction) -> TaskFunction:
        if kind in _kinds and _kinds[kind].function is not function:
            raise ValueError(f"task kind {kind!r} is registered twice")
        _kinds[kind] = TaskKindSpec(kind, function, queue, inputs)
        return function

    return decorate


def load_plugins() -> None:
    """Import the modules that register kinds (once per process)."""
    global _loaded
    if _loaded:
        return
    extra = [m.strip() for m in os.environ.get("EVOTRAINER_TASK_MODULES", "").split(",") if m.strip()]
    for module in (*_BUILTIN_MODULES, *extra):
        importlib.import_module(module)
    _loaded = True


def kind_spec(kind: str) -> TaskKindSpec:
    load_plugins()
    try:
        return _kinds[kind]
    except KeyError:
        raise TaskInputError(
            f"no task function is registered for kind {kind!r} on this worker "
            f"(registered: {', '.join(sorted(_kinds)) or 'none'}; EVOTRAINER_TASK_MODULES adds more)"
        ) from None


def registered_kinds() -> list[str]:
    load_plugins()
    return sorted(_kinds)


def validate_inputs(spec: TaskKindSpec, task: TaskRequested) -> Any:
    """The request's inputs as the kind's input model; TaskInputError says what is wrong."""
    if spec.inputs_model is None:
        return dict(task.inputs)
    try:
        return spec.inputs_model.model_validate(task.inputs)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(inputs)'}: {err['msg']}" for err in exc.errors()
        )
        raise TaskInputError(f"task {task.task_id} (kind {task.kind}) has invalid inputs: {problems}") from None


@dataclass(frozen=True)
class TaskSpec:
    """One task of a bulk request (request_tasks); the arguments of request_task."""

    kind: str
    task_id: str
    inputs: dict[str, Any] | None = None
    max_attempts: int = 3
    queue: str | None = None

    def event(self) -> NewEvent:
        """Its TaskRequested, keyed so that requesting it again on the branch is a no-op."""
        payload = TaskRequested(
            task_id=self.task_id, kind=self.kind, queue=self.queue or kind_spec(self.kind).queue,
            inputs=self.inputs or {}, max_attempts=self.max_attempts,
        )
        return NewEvent.of(payload, idempotency_key=f"{self.task_id}:requested")


def request_task(
    store: EventStore,
    ref: BranchRef,
    kind: str,
    task_id: str,
    inputs: dict[str, Any] | None = None,
    max_attempts: int = 3,
    queue: str | None = None,
) -> StoredEvent:
    """Append a TaskRequested for `kind` (idempotent per task id on the branch). With a
    broker configured, this process publishes the task itself once the request has
    committed (evotrainer.fleet.handoff): the task starts without waiting for the
    dispatcher, at the cost of a broker round trip here. Many tasks at once go faster
    through request_tasks."""
    from evotrainer.fleet.handoff import direct

    event = TaskSpec(kind, task_id, inputs, max_attempts, queue).event()
    # Inside a caller's transaction the commit is not ours: a message sent before it would
    # reach a worker that cannot see the request yet. The dispatcher hands those off.
    own_hand_off = direct.available() and not store.in_transaction()
    with store.transaction() as conn:
        stored = store.append(ref, [event])[0]
        own_hand_off = own_hand_off and direct.record(conn, stored)
        if not own_hand_off:
            # Wakes the dispatcher when this commits (evotrainer.fleet.outbox.NOTIFY_CHANNEL).
            conn.execute("NOTIFY evotrainer_fleet")
    if own_hand_off:
        direct.publish(store.conn, stored)
    return stored


def request_tasks(store: EventStore, ref: BranchRef, tasks: Sequence[TaskSpec]) -> list[StoredEvent]:
    """Request many tasks in one transaction (each idempotent per task id on the branch),
    all or none. The dispatcher hands them to the broker in batches, which costs this
    process one append instead of a broker round trip per task (request_task)."""
    events = [task.event() for task in tasks]
    with store.transaction() as conn:
        stored = store.append(ref, events)
        conn.execute("NOTIFY evotrainer_fleet")  # evotrainer.fleet.outbox.NOTIFY_CHANNEL
    return stored


class NoopInputs(BaseModel):
    model_config = ConfigDict(extra="forbid")


@register_kind("noop", queue="control", inputs=NoopInputs)
def noop(request: TaskRequest) -> TaskResult:
    """Does nothing: for smoke tests and for measuring the fleet's own overhead."""
    return TaskResult()
