"""Policies, GRPO training (TRL), rollout evidence and Avg@k evaluation.

Importing this package is cheap: torch, TRL and transformers load inside the functions.

    from evotrainer.training import GRPOSettings, TrainingRequest, train_grpo, EvaluationRequest, evaluate
"""

from evotrainer.training.evaluation import evaluate
from evotrainer.training.grpo_config import (
    EvaluationRequest,
    GRPOSettings,
    InvalidTrainingConfigError,
    TrainingRequest,
)
from evotrainer.training.grpo_trainer import train_grpo
from evotrainer.training.policies import PolicyCheckpoint, load_policy, resolve_policy
from evotrainer.training.results import EvaluationResult, TrainingResult

__all__ = [
    "EvaluationRequest",
    "EvaluationResult",
    "GRPOSettings",
    "InvalidTrainingConfigError",
    "PolicyCheckpoint",
    "TrainingRequest",
    "TrainingResult",
    "evaluate",
    "load_policy",
    "resolve_policy",
    "train_grpo",
]
