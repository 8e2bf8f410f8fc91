"""Events of the work queue: requests handed to workers and their outcomes."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from evotrainer.events.base import Event, Payload, register, upcaster

TaskKind = Literal["train", "rollout", "evaluate", "diagnose", "backtest", "control", "noop"]


@register
class TaskRequestedV1(Event):
    """A unit of work for the fleet; workers recompute everything from `inputs`."""

    # v1: `kind` was one of a closed list (TaskKind).
    event_type = "TaskRequested"
    schema_version = 1

    task_id: str = Field(min_length=1)
    kind: TaskKind
    queue: str = Field(min_length=1)
    inputs: dict[str, Any] = Field(default_factory=dict)
    max_attempts: int = Field(default=3, ge=1)


@register
class TaskRequested(Event):
    """A unit of work for the fleet; workers recompute everything from `inputs`.

    v2: `kind` names an entry of the fleet's task registry (evotrainer.fleet.registry),
    so subsystems and plugins add kinds without a new schema; a kind no worker knows
    ends as TaskFailed, not as a refused append.
    """

    schema_version = 2

    task_id: str = Field(min_length=1)
    kind: str = Field(pattern=r"^[a-z][a-z0-9_.-]{0,63}$")
    queue: str = Field(min_length=1)
    inputs: dict[str, Any] = Field(default_factory=dict)
    max_attempts: int = Field(default=3, ge=1)


@upcaster("TaskRequested", 1)
def _task_requested_v1_to_v2(payload: Payload) -> Payload:
    # Every v1 kind is a valid v2 kind: the shape is unchanged.
    return payload


@register
class TaskCompleted(Event):
    """A task finished; its domain events were appended under the same idempotency key."""

    task_id: str = Field(min_length=1)
    worker: str
    attempt: int = Field(ge=1)
    outputs: dict[str, Any] = Field(default_factory=dict)
    duration_s: float = Field(ge=0)


@register
class TaskFailed(Event):
    """A task failed; deterministic failures are recorded once and not retried."""

    task_id: str = Field(min_length=1)
    worker: str
    attempt: int = Field(ge=1)
    error_class: str
    message: str
    traceback: str = ""
    retryable: bool = False
