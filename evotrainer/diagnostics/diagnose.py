"""Run a harness's diagnostic suite over evidence: findings, conditions, blocking.

    diagnosis = diagnose(DiagnosisInput(EvidenceView(records)), HarnessSpec())
    diagnosis.event(evidence_sha, harness_hash)    # the DiagnosisRecorded payload

Only the analyzers the harness names (and enables) run, with the harness's thresholds.
Findings come in layer order (score, signal, behaviour), then by name, so equal inputs
give equal events.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from evotrainer.diagnostics.base import Analyzer, DiagnosisInput, finding
from evotrainer.diagnostics.registry import UnknownAnalyzerError, available_analyzers
from evotrainer.diagnostics.rules import Condition, conditions
from evotrainer.events import DiagnosisRecorded, Finding
from evotrainer.harness.spec import HarnessSpec, PromotionSpec

_LAYER_ORDER = {"score": 0, "signal": 1, "behaviour": 2}
_SEVERITY_RANK = {"info": 0, "warning": 1, "critical": 2}


@dataclass(frozen=True)
class Diagnosis:
    findings: tuple[Finding, ...]
    conditions: tuple[Condition, ...]
    blocking: bool
    blocking_reasons: tuple[str, ...]

    def event(self, evidence: str, harness_hash: str | None) -> DiagnosisRecorded:
        return DiagnosisRecorded(
            evidence=evidence, harness_hash=harness_hash, findings=list(self.findings),
            conditions=[c.name for c in self.conditions], blocking=self.blocking,
        )  # fmt: skip

    def to_json(self) -> dict[str, object]:
        return {
            "findings": [f.model_dump(mode="json") for f in self.findings],
            "conditions": [{"name": c.name, "because": c.because, "suggestion": c.suggestion} for c in self.conditions],
            "blocking": self.blocking,
            "blocking_reasons": list(self.blocking_reasons),
        }


def diagnose(data: DiagnosisInput, spec: HarnessSpec, analyzers: Mapping[str, Analyzer] | None = None) -> Diagnosis:
    known = available_analyzers() if analyzers is None else analyzers
    results = []
    for name, settings in sorted(spec.diagnostics.items()):
        if not settings.enabled:
            continue
        if name not in known:
            raise UnknownAnalyzerError(
                f"harness names analyzer {name!r}, which is not installed; known: {', '.join(sorted(known))}"
            )
        analyzer = known[name]
        results.append(finding(analyzer, settings, analyzer.measure(data, settings.params)))
    results.sort(key=lambda f: (_LAYER_ORDER[f.layer], f.analyzer))
    found = conditions(results)
    reasons = blocking_reasons(results, [c.name for c in found], spec.promotion)
    return Diagnosis(tuple(results), tuple(found), bool(reasons), tuple(reasons))


def blocking_reasons(findings: Sequence[Finding], condition_names: Sequence[str], gate: PromotionSpec) -> list[str]:
    """What in a diagnosis keeps a branch from promotion under `gate`: findings of its
    blocking (validity) analyzers at or above its blocking severity, and the conditions it
    names. Signal-health findings inform proposals; they veto only when the gate lists them."""
    reasons = [f"{f.metric} {f.severity}" for f in findings if f.analyzer in gate.blocking_analyzers
               and _SEVERITY_RANK[f.severity] >= _SEVERITY_RANK[gate.blocking_severity]]  # fmt: skip
    reasons += [f"condition {name}" for name in condition_names if name in gate.blocking_conditions]
    return reasons
