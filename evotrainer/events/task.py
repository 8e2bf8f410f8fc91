"""Events of the work queue: requests handed to workers and their outcomes."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from evotrainer.events.base import Event, register

TaskKind = Literal["train", "rollout", "evaluate", "diagnose", "backtest", "control", "noop"]


@register
class TaskRequested(Event):
    """A unit of work for the fleet; workers recompute everything from `inputs`."""

    task_id: str = Field(min_length=1)
    kind: TaskKind
    queue: str = Field(min_length=1)
    inputs: dict[str, Any] = Field(default_factory=dict)
    max_attempts: int = Field(default=3, ge=1)


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
