"""Events about policies: checkpoints, training runs, their rollout evidence and evaluations.

Every large thing (weights, evidence, per-problem results) is an artifact addressed by
its sha256; these payloads carry the hashes and the headline numbers. `request` fields
hold the exact training or evaluation request, which is what replay re-executes.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from evotrainer.events.base import SHA256_PATTERN, Event, register

_SHA = SHA256_PATTERN


@register
class PolicyCheckpointed(Event):
    """A policy's weights were stored as a content-addressed artifact."""

    policy_sha256: str = Field(pattern=_SHA)
    parent_sha256: str | None = Field(default=None, pattern=_SHA)
    kind: Literal["tiny", "smollm2", "hf_dir", "trained"]
    parameters: int = Field(ge=0)
    size_bytes: int = Field(ge=0)
    source: str = ""
    details: dict[str, Any] = Field(default_factory=dict)


@register
class TrainingCompleted(Event):
    """A GRPO run finished: the checkpoint it produced and how it got there."""

    request: dict[str, Any]
    base_policy_sha256: str = Field(pattern=_SHA)
    policy_sha256: str = Field(pattern=_SHA)
    evidence_sha256: str = Field(pattern=_SHA)
    harness_hash: str | None = Field(default=None, pattern=_SHA)
    steps: int = Field(ge=0)
    train_tasks_used: int = Field(ge=0)
    step_metrics: list[dict[str, Any]] = Field(default_factory=list)
    environment: dict[str, Any] = Field(default_factory=dict)
    wall_seconds: float = Field(ge=0)
    tokens: int = Field(default=0, ge=0, description="prompt and completion tokens of every rollout")
    cpu_seconds: float = Field(default=0.0, ge=0, description="CPU time of the training process over the run")
    gpu_seconds: float = Field(default=0.0, ge=0, description="wall time the run held a GPU (0 on CPU)")


@register
class RolloutsRecorded(Event):
    """Every sampled completion of a run, stored as an evidence artifact (JSONL)."""

    evidence_sha256: str = Field(pattern=_SHA)
    policy_sha256: str = Field(pattern=_SHA)
    base_policy_sha256: str = Field(pattern=_SHA)
    harness_hash: str | None = Field(default=None, pattern=_SHA)
    format: Literal["jsonl"] = "jsonl"
    evidence_version: int = Field(default=1, ge=1)
    summary: dict[str, float] = Field(default_factory=dict)
    environment: dict[str, Any] = Field(default_factory=dict)


@register
class EvaluationRecorded(Event):
    """Avg@k of a policy on the held-out split, with the per-problem results as an artifact."""

    request: dict[str, Any]
    policy_sha256: str = Field(pattern=_SHA)
    metric: str
    avg_at_k: float = Field(ge=0, le=1)
    pass_at_k: float = Field(ge=0, le=1)
    k: int = Field(ge=1)
    problems: int = Field(ge=0)
    component_means: dict[str, float] = Field(default_factory=dict)
    results_sha256: str = Field(pattern=_SHA)
    environment: dict[str, Any] = Field(default_factory=dict)
    wall_seconds: float = Field(ge=0)
