"""The event catalogue: one frozen pydantic model per event type, grouped by subject.

Importing this package registers every type; `model_for`, `event_types` and `upcast`
answer questions about the catalogue, and `evotrainer.events.schemas` turns it into JSON
Schemas and compiled validators.
"""

from evotrainer.events import experiment, harness, intervention, policy, proposer, task
from evotrainer.events.base import (
    Event,
    all_models,
    event_types,
    latest_version,
    model_for,
    register,
    upcast,
    upcaster,
)
from evotrainer.events.experiment import BranchForked, ExperimentCreated
from evotrainer.events.harness import DiagnosisRecorded, DiagnosticRevised, Finding, HarnessVersioned
from evotrainer.events.intervention import (
    BacktestCompleted,
    ComparisonRecorded,
    InterventionProposed,
    PromotionDecided,
    SkillImported,
    SkillRecorded,
)
from evotrainer.events.policy import (
    EvaluationRecorded,
    PolicyCheckpointed,
    RolloutsRecorded,
    TrainingCompleted,
)
from evotrainer.events.proposer import DecisionRecorded, DecisionRequested, ProposerReplied
from evotrainer.events.task import TaskCompleted, TaskFailed, TaskRequested

__all__ = [
    "BacktestCompleted",
    "BranchForked",
    "ComparisonRecorded",
    "DecisionRecorded",
    "DecisionRequested",
    "DiagnosisRecorded",
    "DiagnosticRevised",
    "EvaluationRecorded",
    "Event",
    "ExperimentCreated",
    "Finding",
    "HarnessVersioned",
    "InterventionProposed",
    "PolicyCheckpointed",
    "PromotionDecided",
    "ProposerReplied",
    "RolloutsRecorded",
    "SkillImported",
    "SkillRecorded",
    "TaskCompleted",
    "TaskFailed",
    "TaskRequested",
    "TrainingCompleted",
    "all_models",
    "event_types",
    "experiment",
    "harness",
    "intervention",
    "latest_version",
    "model_for",
    "policy",
    "proposer",
    "register",
    "task",
    "upcast",
    "upcaster",
]
