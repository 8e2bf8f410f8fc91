"""Events about policies: checkpoints, training runs, their rollout evidence and evaluations."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from evotrainer.events.base import Event, register

Sha256 = str
_SHA = r"^[0-9a-f]{64}$"


@register
class PolicyCheckpointed(Event):
    """A policy's weights were stored as a content-addressed artifact."""

    artifact: Sha256 = Field(pattern=_SHA)
    kind: Literal["tiny", "smollm2", "local"]
    parent_artifact: Sha256 | None = Field(default=None, pattern=_SHA)
    parameters: int = Field(ge=0)
    size_bytes: int = Field(ge=0)
    source: str = ""


@register
class RolloutsRecorded(Event):
    """Every sampled completion of a run, stored as an evidence artifact."""

    evidence: Sha256 = Field(pattern=_SHA)
    rollouts: int = Field(ge=0)
    groups: int = Field(ge=0)
    policy_artifact: Sha256 = Field(pattern=_SHA)
    harness_hash: Sha256 | None = Field(default=None, pattern=_SHA)
    reward_components: list[str] = Field(default_factory=list)


@register
class TrainingCompleted(Event):
    """A GRPO run finished: the checkpoint it produced and how it got there."""

    policy_artifact: Sha256 = Field(pattern=_SHA)
    parent_policy_artifact: Sha256 | None = Field(default=None, pattern=_SHA)
    evidence: Sha256 = Field(pattern=_SHA)
    harness_hash: Sha256 | None = Field(default=None, pattern=_SHA)
    steps: int = Field(ge=0)
    seed: int
    metrics: dict[str, Any] = Field(default_factory=dict)
    environment: dict[str, Any] = Field(default_factory=dict)
    duration_s: float = Field(ge=0)


@register
class EvaluationRecorded(Event):
    """Avg@k of a policy on the held-out split, with the per-problem results as an artifact."""

    policy_artifact: Sha256 = Field(pattern=_SHA)
    split: str = "eval"
    k: int = Field(ge=1)
    problems: int = Field(ge=0)
    avg_at_k: float = Field(ge=0, le=1)
    results: Sha256 = Field(pattern=_SHA)
    seed: int
    protocol: dict[str, Any] = Field(default_factory=dict)
