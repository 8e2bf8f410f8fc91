"""Three-layer diagnostics over stored rollout evidence (Score, Signal, Behaviour), the rule
engine that names conditions, and retro-validated revision of the suite itself.

    from evotrainer.diagnostics import EvidenceView, DiagnosisInput, diagnose
    diagnosis = diagnose(DiagnosisInput(EvidenceView(records)), HarnessSpec())
"""

from evotrainer.diagnostics.base import (
    Analyzer,
    DiagnosisInput,
    Evaluation,
    EvidenceView,
    Measurement,
    finding,
    grade,
)
from evotrainer.diagnostics.diagnose import Diagnosis, diagnose
from evotrainer.diagnostics.registry import (
    BUILTIN,
    ENTRY_POINT_GROUP,
    InvalidAnalyzerError,
    UnknownAnalyzerError,
    analyzer,
    available_analyzers,
)
from evotrainer.diagnostics.revision import (
    LabelledRun,
    Revision,
    labelled_runs,
    retro_validate,
    revise,
    revision_events,
)
from evotrainer.diagnostics.rules import RULES, Condition, conditions

__all__ = [
    "BUILTIN",
    "ENTRY_POINT_GROUP",
    "RULES",
    "Analyzer",
    "Condition",
    "Diagnosis",
    "DiagnosisInput",
    "Evaluation",
    "EvidenceView",
    "InvalidAnalyzerError",
    "LabelledRun",
    "Measurement",
    "Revision",
    "UnknownAnalyzerError",
    "analyzer",
    "available_analyzers",
    "conditions",
    "diagnose",
    "finding",
    "grade",
    "labelled_runs",
    "retro_validate",
    "revise",
    "revision_events",
]
