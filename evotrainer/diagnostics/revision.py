"""Diagnostic revision: an analyzer joins the harness only if it separates good runs from bad.

The new or changed analyzer is replayed over earlier versions' stored evidence whose
outcome is known (a PromotionDecided: promoted = good, rejected = bad). A run counts as
flagged when the analyzer's finding is at warning or worse under the proposed thresholds.
It is accepted when it flags bad runs and spares good ones well enough:

    balanced accuracy = (bad runs flagged / bad runs + good runs spared / good runs) / 2

at least the harness's `revision.min_balanced_accuracy`, with at least
`revision.min_runs_per_label` runs of each label. The figures go into DiagnosticRevised.

    events = revise(store, BranchRef.parse("demo/main"), LeakRate(), AnalyzerSettings(warning=0.1))
    store.append(BranchRef.parse("demo/main"), events)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from evotrainer.artifacts import ArtifactStore
from evotrainer.diagnostics.base import Analyzer, finding
from evotrainer.diagnostics.inputs import diagnosis_input, evidence_events, evidence_of, read_evidence
from evotrainer.events import DiagnosticRevised
from evotrainer.evidence import RolloutRecord
from evotrainer.harness.spec import AnalyzerSettings, HarnessSpec
from evotrainer.harness.versions import branch_harness, versioned_event
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, NewEvent, StoredEvent


@dataclass(frozen=True)
class LabelledRun:
    """One earlier version's evidence and how it was later judged."""

    name: str
    records: Sequence[RolloutRecord]
    good: bool


@dataclass(frozen=True)
class Revision:
    event: DiagnosticRevised
    candidate: HarnessSpec | None
    """The harness with the analyzer in its suite, when accepted."""

    @property
    def accepted(self) -> bool:
        return self.event.accepted


def retro_validate(
    analyzer: Analyzer,
    settings: AnalyzerSettings,
    runs: Sequence[LabelledRun],
    base: HarnessSpec,
    gap: str = "",
) -> Revision:
    """Replay `analyzer` over labelled runs under `base`'s framing and decide."""
    rows: list[dict[str, Any]] = []
    for run in runs:
        m = analyzer.measure(diagnosis_input(list(run.records), base), settings.params)
        f = finding(analyzer, settings, m)
        rows.append({"run": run.name, "good": run.good, "value": f.value, "severity": f.severity,
                     "flagged": f.severity != "info"})  # fmt: skip
    bad = [r for r in rows if not r["good"]]
    good = [r for r in rows if r["good"]]
    rules = base.revision
    tpr = sum(r["flagged"] for r in bad) / len(bad) if bad else math.nan
    tnr = sum(not r["flagged"] for r in good) / len(good) if good else math.nan
    balanced = (tpr + tnr) / 2 if bad and good else math.nan
    enough = len(bad) >= rules.min_runs_per_label and len(good) >= rules.min_runs_per_label
    accepted = enough and balanced >= rules.min_balanced_accuracy
    if not enough:
        reason = (f"needs at least {rules.min_runs_per_label} good and {rules.min_runs_per_label} bad runs; "
                  f"got {len(good)} good, {len(bad)} bad")  # fmt: skip
    elif accepted:
        reason = f"balanced accuracy {balanced:.3f} >= {rules.min_balanced_accuracy}"
    else:
        reason = f"balanced accuracy {balanced:.3f} < {rules.min_balanced_accuracy}: it does not separate the runs"
    validation = {
        "runs": rows, "good_runs": len(good), "bad_runs": len(bad),
        "true_positive_rate": None if math.isnan(tpr) else tpr,
        "true_negative_rate": None if math.isnan(tnr) else tnr,
        "balanced_accuracy": None if math.isnan(balanced) else balanced,
        "min_balanced_accuracy": rules.min_balanced_accuracy, "reason": reason,
    }  # fmt: skip
    existing = base.diagnostics.get(analyzer.name)
    change: Literal["added", "changed"] = "changed" if existing is not None else "added"
    thresholds = {k: v for k, v in (("warning", settings.warning), ("critical", settings.critical)) if v is not None}
    thresholds.update(settings.params)
    event = DiagnosticRevised(
        analyzer=analyzer.name, analyzer_version=analyzer.version, change=change, thresholds=thresholds,
        gap=gap, validation=validation, accepted=accepted,
    )  # fmt: skip
    candidate = None
    if accepted:
        joined = settings.model_copy(update={"version": analyzer.version})
        candidate = HarnessSpec.parse({**base.to_json(), "diagnostics": {
            **{k: v.model_dump(mode="json") for k, v in base.diagnostics.items()},
            analyzer.name: joined.model_dump(mode="json")}})  # fmt: skip
    return Revision(event, candidate)


def labelled_runs(store: EventStore, experiment: str, artifacts: ArtifactStore | None = None) -> list[LabelledRun]:
    """Every judged candidate branch of an experiment with the evidence of its last run
    before the decision: its own run (evidence inherited from the parent is the parent's),
    and not a later one (that was not what was judged). A candidate judged more than once
    keeps its latest decision; one without a run of its own is left out."""
    histories = {str(info.ref): store.read_branch(info.ref) for info in store.branches(experiment)}
    # A fork inherits its parent's prefix, so one decision shows up in several histories;
    # keyed by candidate and kept by global position, each counts once and the last wins.
    decisions: dict[str, StoredEvent] = {}
    for history in histories.values():
        for event in history:
            if event.type != "PromotionDecided":
                continue
            earlier = decisions.get(event.payload["candidate"])
            if earlier is None or earlier.global_position < event.global_position:
                decisions[event.payload["candidate"]] = event
    runs = []
    for name, decision in sorted(decisions.items()):
        candidate = BranchRef.parse(name, allow_seq=False)
        history = histories.get(str(candidate)) or store.read_branch(candidate)
        own = (candidate.experiment, candidate.branch)
        judged = evidence_events([e for e in history if (e.experiment, e.branch) == own
                                  and e.global_position < decision.global_position])  # fmt: skip
        if judged:
            sha = evidence_of(judged[-1]) or ""
            good = decision.payload["decision"] == "promoted"
            runs.append(LabelledRun(str(candidate), read_evidence(sha, artifacts), good))
    return runs


def revise(
    store: EventStore, branch: BranchRef, analyzer: Analyzer, settings: AnalyzerSettings, gap: str = "",
    artifacts: ArtifactStore | None = None,
) -> list[NewEvent]:  # fmt: skip
    """Retro-validate `analyzer` over the experiment's judged runs under the branch's
    harness: the events to append to the branch (the default harness first when it has
    none, DiagnosticRevised, and when accepted the HarnessVersioned that adds it)."""
    harness = branch_harness(store, branch)
    runs = labelled_runs(store, branch.experiment, artifacts)
    revision = retro_validate(analyzer, settings, runs, harness.spec, gap)
    return harness.unrecorded_default() + revision_events(revision, harness.address)


def revision_events(revision: Revision, parent: str) -> list[NewEvent]:
    """DiagnosticRevised, and when accepted the harness version that includes the analyzer."""
    e = revision.event
    key = f"revision:{e.analyzer}:{e.analyzer_version}:{parent}"
    out = [NewEvent.of(e, idempotency_key=key)]
    if revision.candidate is not None:
        out.append(versioned_event(revision.candidate, parent, [f"diagnostics.{e.analyzer}"]))
    return out
