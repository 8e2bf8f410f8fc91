"""Loading what the diagnostics read from the store: a branch's evidence and evaluations.

Evidence is the JSONL artifact a RolloutsRecorded (or TrainingCompleted) event names;
evaluations are the branch's EvaluationRecorded events. Nothing here imports training.
"""

from __future__ import annotations

from dataclasses import dataclass

from evotrainer.artifacts import ArtifactStore, open_store
from evotrainer.diagnostics.base import DiagnosisInput, Evaluation, EvidenceView
from evotrainer.errors import NotFoundError
from evotrainer.evidence import RolloutRecord, from_jsonl
from evotrainer.harness.spec import HarnessSpec
from evotrainer.lineage.provenance import Provenance
from evotrainer.refs import BranchRef
from evotrainer.store import StoredEvent

EVIDENCE_EVENTS = ("RolloutsRecorded", "TrainingCompleted")
_EVIDENCE_KEYS = ("evidence_sha256", "evidence")
"""Where an event names its evidence artifact (the current field name first)."""


def evidence_of(event: StoredEvent) -> str | None:
    """The evidence artifact an event names, if it is an evidence-carrying event."""
    if event.type not in EVIDENCE_EVENTS:
        return None
    return next((event.payload[k] for k in _EVIDENCE_KEYS if event.payload.get(k)), None)


@dataclass(frozen=True)
class BranchEvidence:
    sha256: str
    records: list[RolloutRecord]
    event_seq: int


def evidence_events(history: list[StoredEvent]) -> list[StoredEvent]:
    """Events that name an evidence artifact, oldest first (one per run: the
    RolloutsRecorded when present, since TrainingCompleted names the same artifact)."""
    seen: set[str] = set()
    out = []
    for e in history:
        sha = evidence_of(e)
        if sha and sha not in seen:
            seen.add(sha)
            out.append(e)
    return out


def read_evidence(sha256: str, artifacts: ArtifactStore | None = None) -> list[RolloutRecord]:
    return from_jsonl((artifacts or open_store()).get(sha256))


def branch_evidence(
    history: list[StoredEvent], ref: BranchRef, evidence: str | None = None, artifacts: ArtifactStore | None = None
) -> BranchEvidence:
    """The latest evidence in the history of branch `ref` (or the one named, which must be
    in it). The caller reads the history once and hands it to each of these readers."""
    runs = evidence_events(history)
    if evidence is not None:
        runs = [e for e in runs if (evidence_of(e) or "").startswith(evidence)]
    if not runs:
        what = f"evidence {evidence}" if evidence else "rollout evidence (RolloutsRecorded)"
        raise NotFoundError(f"branch {ref} has no {what}")
    event = runs[-1]
    sha = evidence_of(event) or ""
    return BranchEvidence(sha, read_evidence(sha, artifacts), event.seq)


def branch_evaluations(history: list[StoredEvent]) -> list[Evaluation]:
    """The EvaluationRecorded events of a branch history that an evaluate task produced,
    oldest first: a score appended by hand steers no diagnosis (lineage.provenance)."""
    provenance = Provenance(history)
    return [
        Evaluation(str(e.payload.get("policy_sha256", "")), float(e.payload["avg_at_k"]), int(e.payload["k"]), e.seq)
        for e in history
        if e.type == "EvaluationRecorded" and provenance.vouched(e)
    ]


def diagnosis_input(
    records: list[RolloutRecord], spec: HarnessSpec, evaluations: list[Evaluation] | None = None
) -> DiagnosisInput:
    """Evidence and evaluations framed by a harness: its truth component, weights and dead-group std."""
    return DiagnosisInput(
        evidence=EvidenceView(records, spec.rewards.correctness_component),
        evaluations=tuple(evaluations or ()),
        min_group_std=spec.filters.min_group_std,
        reward_weights=dict(spec.rewards.weights),
    )
