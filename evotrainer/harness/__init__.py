"""The evolving training harness: versioned specs, single-factor interventions, criteria.

    from evotrainer.harness import HarnessSpec, design_intervention
    base = HarnessSpec()
    proposal = design_intervention(base, {"rewards.weights.format": 0.1}, hypothesis="...")
"""

from evotrainer.harness.criterion import InvalidCriterionError, Verdict, check_criterion, parse_criterion
from evotrainer.harness.intervention import (
    DesignedIntervention,
    MultiFieldInterventionError,
    default_criterion,
    design_intervention,
)
from evotrainer.harness.spec import (
    AnalyzerSettings,
    HarnessSpec,
    InvalidHarnessError,
    default_diagnostics,
    diff,
    leaves,
)

__all__ = [
    "AnalyzerSettings",
    "DesignedIntervention",
    "HarnessSpec",
    "InvalidCriterionError",
    "InvalidHarnessError",
    "MultiFieldInterventionError",
    "Verdict",
    "check_criterion",
    "default_criterion",
    "default_diagnostics",
    "design_intervention",
    "diff",
    "leaves",
    "parse_criterion",
]
