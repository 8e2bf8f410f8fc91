"""What training and evaluation return: typed results and the JSON payloads of their events.

The worker appends the events; these classes only say what goes in them:
    TrainingResult.policy_payload()       -> PolicyCheckpointed (the trained policy)
    TrainingResult.training_payload()     -> TrainingCompleted
    TrainingResult.rollouts_payload()     -> RolloutsRecorded
    EvaluationResult.evaluation_payload() -> EvaluationRecorded
Hashes are artifact ids in the store; large data (weights, evidence, per-problem results)
lives there, never in events.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evotrainer.evidence import EVIDENCE_VERSION
from evotrainer.training.policies import PolicyCheckpoint


@dataclass(frozen=True)
class TrainingResult:
    """A finished GRPO run."""

    request: Mapping[str, Any]
    """The TrainingRequest as JSON (what replay re-executes)."""
    base_policy: PolicyCheckpoint
    """The policy training started from (created=True if this run had to build it)."""
    policy: PolicyCheckpoint
    """The trained checkpoint; its parent is `base_policy`."""
    evidence_sha256: str
    evidence_summary: Mapping[str, float]
    step_metrics: Sequence[Mapping[str, float | None]]
    environment: Mapping[str, Any]
    train_tasks_used: int
    """Training tasks left after the data filters."""
    wall_seconds: float = 0.0
    """Wall time of the run; informational, never part of a hash."""
    tokens: int = 0
    """Prompt and completion tokens of every rollout (the compute's size in tokens)."""
    cpu_seconds: float = 0.0
    """CPU time of this process (all its threads) over the run; informational."""
    gpu_seconds: float = 0.0
    """Wall time the run held a GPU (0 on CPU); informational."""

    def policy_payload(self) -> dict[str, Any]:
        return self.policy.event_payload()

    def training_payload(self) -> dict[str, Any]:
        """Payload of TrainingCompleted."""
        return {
            "request": dict(self.request),
            "base_policy_sha256": self.base_policy.sha256,
            "policy_sha256": self.policy.sha256,
            "evidence_sha256": self.evidence_sha256,
            "steps": len(self.step_metrics),
            "train_tasks_used": self.train_tasks_used,
            "step_metrics": [dict(m) for m in self.step_metrics],
            "environment": dict(self.environment),
            "wall_seconds": self.wall_seconds,
            "tokens": self.tokens,
            "cpu_seconds": self.cpu_seconds,
            "gpu_seconds": self.gpu_seconds,
        }

    def rollouts_payload(self) -> dict[str, Any]:
        """Payload of RolloutsRecorded (the evidence artifact and its headline numbers)."""
        return {
            "evidence_sha256": self.evidence_sha256,
            "policy_sha256": self.policy.sha256,
            "base_policy_sha256": self.base_policy.sha256,
            "format": "jsonl",
            "evidence_version": EVIDENCE_VERSION,
            "summary": dict(self.evidence_summary),
            "environment": dict(self.environment),
        }


@dataclass(frozen=True)
class EvaluationResult:
    """Avg@k of one policy on a held-out split."""

    request: Mapping[str, Any]
    policy_sha256: str
    avg_at_k: float
    """Mean over problems of the share of the k samples that are correct."""
    pass_at_k: float
    """Share of problems with at least one correct sample."""
    k: int
    problems: int
    component_means: Mapping[str, float]
    results_sha256: str
    """Per-problem results (JSONL) in the artifact store."""
    environment: Mapping[str, Any]
    wall_seconds: float = 0.0
    extra: Mapping[str, Any] = field(default_factory=dict)
    base_policy: PolicyCheckpoint | None = None
    """The stored checkpoint a named policy spec (tiny, smollm2, hf:DIR) resolved to."""

    def evaluation_payload(self) -> dict[str, Any]:
        """Payload of EvaluationRecorded."""
        return {
            "request": dict(self.request),
            "policy_sha256": self.policy_sha256,
            "metric": f"avg@{self.k}",
            "avg_at_k": self.avg_at_k,
            "pass_at_k": self.pass_at_k,
            "k": self.k,
            "problems": self.problems,
            "component_means": dict(self.component_means),
            "results_sha256": self.results_sha256,
            "environment": dict(self.environment),
            "wall_seconds": self.wall_seconds,
        }
