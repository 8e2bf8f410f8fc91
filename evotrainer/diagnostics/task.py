"""The diagnose task as a plain function the fleet registers for kind "diagnose".

    events = diagnose_task(store, {"branch": "demo/main"})   # optional "evidence": sha256
    store.append(BranchRef.parse("demo/main"), events)

It reads the branch's harness, evidence and evaluations and returns the events to append
(the default HarnessVersioned first when the branch has none, then DiagnosisRecorded),
each with an idempotency key derived from its inputs, so a redelivered task is a no-op.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evotrainer.artifacts import ArtifactStore
from evotrainer.diagnostics.diagnose import Diagnosis, diagnose
from evotrainer.diagnostics.inputs import branch_evaluations, branch_evidence, diagnosis_input
from evotrainer.errors import UsageError
from evotrainer.harness.versions import BranchHarness, harness_of
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, NewEvent


@dataclass(frozen=True)
class DiagnosisRun:
    """A diagnosis and what it was computed from (for reports)."""

    branch: BranchRef
    harness: BranchHarness
    evidence: str
    rollouts: int
    diagnosis: Diagnosis

    def events(self) -> list[NewEvent]:
        out = self.harness.unrecorded_default()
        payload = self.diagnosis.event(self.evidence, self.harness.address)
        out.append(NewEvent.of(payload, idempotency_key=f"diagnosis:{self.evidence}:{self.harness.address}"))
        return out


def request_inputs(request: Mapping[str, Any]) -> Mapping[str, Any]:
    """A TaskRequested payload carries its inputs under "inputs"; accept either shape."""
    inputs = request.get("inputs", request)
    if not isinstance(inputs, Mapping) or "branch" not in inputs:
        raise UsageError("a diagnose/backtest request needs inputs.branch (EXPERIMENT/BRANCH)")
    return inputs


def run_diagnosis(
    store: EventStore, branch: BranchRef, evidence: str | None = None, artifacts: ArtifactStore | None = None
) -> DiagnosisRun:
    # One read of the branch for its harness, evidence and evaluations: a history is long
    # (the inherited prefix included), and separate reads could straddle an append, pairing
    # the evidence of one moment with the harness of another.
    history = store.read_branch(branch)
    harness = harness_of(history)
    found = branch_evidence(history, branch, evidence, artifacts)
    data = diagnosis_input(found.records, harness.spec, branch_evaluations(history))
    return DiagnosisRun(branch, harness, found.sha256, len(found.records), diagnose(data, harness.spec))


def diagnose_task(
    store: EventStore, request: Mapping[str, Any], artifacts: ArtifactStore | None = None
) -> list[NewEvent]:
    """Fleet task "diagnose": inputs {"branch": "EXP/BRANCH", "evidence": sha256 (optional)}."""
    inputs = request_inputs(request)
    branch = BranchRef.parse(str(inputs["branch"]))
    return run_diagnosis(store, branch, inputs.get("evidence"), artifacts).events()
