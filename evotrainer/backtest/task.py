"""The backtest task as a plain function the fleet registers for kind "backtest".

    events = backtest_task(store, {"branch": "demo/main", "intervention_id": "iv-..."})

It finds the InterventionProposed on the branch, rebuilds its base harness (from the
HarnessVersioned with its base hash) and the candidate (base with the one field set),
replays the branch's latest evidence (or inputs.evidence) and returns BacktestCompleted,
passed only when every clause of the intervention's criterion that the figures can check
holds and at least one could be checked. Optional inputs "domain", "train_tasks" and
"data_seed" let a new reward component be scored by the domain from the stored text.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evotrainer.artifacts import ArtifactStore
from evotrainer.backtest.replay import Figures, ScoreMissing, backtest_kind, run_backtest
from evotrainer.diagnostics.inputs import branch_evidence
from evotrainer.diagnostics.task import request_inputs
from evotrainer.errors import NotFoundError
from evotrainer.events import BacktestCompleted, InterventionProposed
from evotrainer.evidence import RolloutRecord
from evotrainer.harness.criterion import Verdict, check_criterion
from evotrainer.harness.spec import HarnessSpec
from evotrainer.harness.versions import spec_of
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, NewEvent, StoredEvent


@dataclass(frozen=True)
class BacktestRun:
    intervention: InterventionProposed
    kind: str
    evidence: str
    figures: Figures
    verdict: Verdict
    seconds: float
    """Wall time of the replay alone (reports only; never in the event)."""

    def event(self) -> BacktestCompleted:
        v = self.verdict
        figures = {**self.figures, "criterion_held": list(v.held), "criterion_failed": list(v.failed),
                   "criterion_unchecked": list(v.unchecked)}  # fmt: skip
        return BacktestCompleted(
            intervention_id=self.intervention.intervention_id, kind=self.kind, evidence=self.evidence,
            figures=figures, criterion=self.intervention.success_criterion, passed=self.verdict.passed,
        )  # fmt: skip

    def events(self) -> list[NewEvent]:
        key = f"backtest:{self.intervention.intervention_id}:{self.evidence}"
        return [NewEvent.of(self.event(), idempotency_key=key)]


def find_intervention(history: list[StoredEvent], branch: BranchRef,
                      intervention_id: str) -> tuple[InterventionProposed, HarnessSpec]:  # fmt: skip
    """The proposal and its base harness, both from the branch's history (read by the caller)."""
    proposals = [e for e in history if e.type == "InterventionProposed"
                 and e.payload["intervention_id"] == intervention_id]  # fmt: skip
    if not proposals:
        known = sorted({e.payload["intervention_id"] for e in history if e.type == "InterventionProposed"})
        raise NotFoundError(f"no intervention {intervention_id!r} on {branch}; proposed there: "
                            f"{', '.join(known) or 'none'}")  # fmt: skip
    proposal = InterventionProposed.model_validate(proposals[-1].payload)
    base_hash = proposal.base_harness_hash
    for e in history:
        if e.type == "HarnessVersioned" and e.payload["harness_hash"] == base_hash:
            return proposal, spec_of(e.payload)
    if base_hash is None or base_hash == HarnessSpec().address():
        return proposal, HarnessSpec()
    raise NotFoundError(f"intervention {intervention_id} is based on harness {base_hash}, not recorded on {branch}")


def domain_scorer(domain: str, train_tasks: int, data_seed: int) -> ScoreMissing:
    """Score a stored completion with the domain, finding its task by prompt_id."""
    from evotrainer.domains import get_domain

    scoring = get_domain(domain)
    tasks = {t.task_id: t for t in scoring.tasks("train", train_tasks, data_seed)}

    def score(record: RolloutRecord, component: str) -> float:
        task = tasks.get(record.prompt_id)
        if task is None:
            raise NotFoundError(f"task {record.prompt_id} is not among the first {train_tasks} {domain} train tasks")
        return float(scoring.score(task, record.text).get(component, 0.0))

    return score


def run_intervention_backtest(
    store: EventStore, branch: BranchRef, intervention_id: str, evidence: str | None = None,
    artifacts: ArtifactStore | None = None, score_missing: ScoreMissing | None = None,
    evidence_branch: BranchRef | None = None,
) -> BacktestRun:  # fmt: skip
    """Replay the intervention proposed on `branch` on that branch's latest evidence, or on
    `evidence_branch`'s: the run of a candidate rejected against `branch` that showed what
    the intervention answers (a start that trained nothing has no evidence of its own)."""
    # One read of the branch serves the proposal, its base harness and the evidence.
    history = store.read_branch(branch)
    proposal, base = find_intervention(history, branch, intervention_id)
    kind = backtest_kind(proposal.field)
    candidate = base.with_field(proposal.field, proposal.new_value)
    if evidence_branch is None:
        found = branch_evidence(history, branch, evidence, artifacts)
    else:
        found = branch_evidence(store.read_branch(evidence_branch), evidence_branch, evidence, artifacts)
    started = time.perf_counter()
    figures = run_backtest(kind, found.records, base, candidate, score_missing)
    seconds = time.perf_counter() - started
    verdict = check_criterion(proposal.success_criterion, figures)
    return BacktestRun(proposal, kind, found.sha256, figures, verdict, seconds)


def backtest_task(
    store: EventStore, request: Mapping[str, Any], artifacts: ArtifactStore | None = None
) -> list[NewEvent]:
    """Fleet task "backtest": inputs {"branch", "intervention_id", "evidence"?,
    "evidence_branch"?, "domain"?, "train_tasks"?, "data_seed"?}."""
    inputs = request_inputs(request)
    scorer = None
    if inputs.get("domain"):
        scorer = domain_scorer(str(inputs["domain"]), int(inputs.get("train_tasks", 64)),
                               int(inputs.get("data_seed", 0)))  # fmt: skip
    run = run_intervention_backtest(
        store, BranchRef.parse(str(inputs["branch"])), str(inputs["intervention_id"]),
        inputs.get("evidence"), artifacts, scorer,
        BranchRef.parse(str(inputs["evidence_branch"])) if inputs.get("evidence_branch") else None,
    )  # fmt: skip
    return run.events()
