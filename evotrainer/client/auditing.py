"""Auditing the record for the client and `evotrainer audit`: hash chains, signed anchors,
heads recorded earlier, artifacts, and the promotion decisions behind the lineage."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from evotrainer.refs import BranchRef
from evotrainer.store import EventStore
from evotrainer.store.audit import AuditProblem, AuditReport


def audit_record(
    store: EventStore, branch: BranchRef | None, heads: Mapping[str, Mapping[str, Any]] | None = None,
    trust: Iterable[Path] | None = None, artifacts: bool = False,
) -> tuple[AuditReport, int]:
    """The audit report (problems of every kind asked for) and how many signed anchors
    were checked."""
    from evotrainer.store.anchors import stored_anchors, trusted_keys, verify_signed_anchors
    from evotrainer.store.audit import audit, verify_anchors

    trusted = trusted_keys(list(trust) if trust else None)
    report = audit(store, branch)
    if heads is not None:
        report.problems.extend(verify_anchors(store, {k: dict(v) for k, v in heads.items()}))
    signed = [a for a in stored_anchors(store, branch.experiment if branch else None) if a.branch in report.heads]
    report.problems.extend(verify_signed_anchors(store, signed, trusted))
    if artifacts:
        report.problems.extend(artifact_problems(store, branch))
    return report, len(signed)


def artifact_problems(store: EventStore, branch: BranchRef | None) -> list[AuditProblem]:
    """Missing or corrupted artifacts, each named by the first event that references it."""
    from evotrainer.artifacts import open_store as open_artifacts
    from evotrainer.artifacts.references import referenced_artifacts

    events = store.read_branch(branch) if branch else store.read_all(limit=10**9)
    references = referenced_artifacts(events)  # type: ignore[arg-type]  # StoredEvent has the fields
    verdicts = open_artifacts().audit(sorted(references))
    problems = []
    for sha, verdict in sorted(verdicts.items()):
        if verdict != "ok":
            where, _, field = references[sha][0].partition(" ")
            exp_branch, _, seq = where.rpartition("@")
            problems.append(AuditProblem(exp_branch, int(seq), f"artifact {sha[:12]} ({field}) is {verdict}"))
    return problems
