"""What each dashboard page shows, read from the store through the library's own functions.

Every function here takes an EventStore whose connection is inside `read_only()` (see
evotrainer/lineage/readonly.py): the same read-only transaction, reader role and
statement timeout as `evotrainer sql`. Nothing here decides anything the library already
decides (statuses, the incumbent, skills, audits): it gathers, for a template to show.
A missing experiment, branch, intervention or evidence raises NotFoundError, which the app
turns into a 404 page.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from evotrainer.errors import NotFoundError
from evotrainer.lineage.dag import LineageDAG
from evotrainer.lineage.tree import BranchSummary, summaries
from evotrainer.refs import BranchRef, check_name
from evotrainer.store import EventStore, StoredEvent

# Per-step curves of the branch page: (title, key in TrainingCompleted.step_metrics). The
# keys are TRL's: the share of prompt groups whose rewards all tie is the dead-group ratio.
CURVES = (("reward", "reward"), ("dead groups (share of groups with zero reward spread)", "frac_reward_zero_std"),
          ("completion length (mean tokens)", "completions/mean_length"))  # fmt: skip

EXPERIMENTS = """
SELECT x.experiment, x.domain, x.description, count(b.branch) AS branches, max(b.best_score) AS best_score,
       (SELECT max(h.head_recorded_at) FROM branch_heads h WHERE h.experiment = x.experiment) AS last_activity
  FROM experiments x LEFT JOIN projections.branch_state b ON b.experiment = x.experiment
 GROUP BY x.experiment, x.domain, x.description ORDER BY last_activity DESC NULLS LAST, x.experiment
"""

# What each fork changed: its BranchForked reason, and the intervention it runs. That is
# the InterventionProposed that caused the HarnessVersioned `fork_for_intervention`
# appends right after the fork (the link evolve/promotion.py's intervention_of follows).
FORK_EDGES = """
SELECT c.experiment || '/' || c.name, f.payload ->> 'reason', iv.payload ->> 'intervention_id'
  FROM branches c
  JOIN events f ON f.branch_id = c.branch_id AND f.seq = c.fork_seq + 1
  LEFT JOIN events h ON h.branch_id = c.branch_id AND h.seq = c.fork_seq + 2 AND h.type = 'HarnessVersioned'
  LEFT JOIN events iv ON iv.event_id = h.causation_id AND iv.type = 'InterventionProposed'
 WHERE c.experiment = %s AND c.parent_id IS NOT NULL
"""

# Tasks in flight: requested in the log with no outcome yet, and where the fleet has got
# with them (queued, running on a worker, its last heartbeat and the newest progress line
# the heartbeat carried: a training run's step and reward, an evaluation's problems done).
RUNNING_TASKS = """
SELECT t.branch, t.kind, t.task_id, coalesce(f.state, t.status), greatest(t.attempts, f.attempts),
       coalesce(f.worker, t.worker), f.heartbeat_at, f.progress
  FROM projections.tasks t
  LEFT JOIN fleet_tasks f ON f.experiment = t.experiment AND f.branch = t.branch AND f.task_id = t.task_id
 WHERE t.experiment = %s AND t.status IN ('requested', 'retrying') AND (%s::text IS NULL OR t.branch = %s)
 ORDER BY t.requested_position
"""


def experiments(store: EventStore) -> list[dict[str, Any]]:
    cursor = store.conn.execute(EXPERIMENTS)
    names = [c.name for c in cursor.description or []]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


@dataclass(frozen=True)
class Lineage:
    experiment: str
    dag: LineageDAG
    info: dict[str, BranchSummary]
    incumbent: str
    edges: dict[str, tuple[str, str | None]]
    """child ref -> (fork reason, intervention id or None)"""
    running: list[tuple[Any, ...]]


def lineage(store: EventStore, experiment: str) -> Lineage:
    """The experiment's branch graph with the statuses `evotrainer lineage` shows."""
    from evotrainer.evolve.promotion import incumbent_of

    check_name("experiment", experiment)
    dag = LineageDAG.from_store(store, experiment)
    if not dag.nodes:
        raise NotFoundError(f"no experiment {experiment}")
    # The gate's rule, not the projection's newest "promoted" row: a decision appended by
    # hand is no best so far (promotion.judged_by_the_gate).
    incumbent = str(incumbent_of(store, experiment))
    info = summaries(store.conn, experiment, {incumbent})
    edges = {ref: (reason or "", iv) for ref, reason, iv in store.conn.execute(FORK_EDGES, (experiment,))}
    running = store.conn.execute(RUNNING_TASKS, (experiment, None, None)).fetchall()
    return Lineage(experiment, dag, info, incumbent, edges, running)


@dataclass
class Branch:
    ref: BranchRef
    summary: BranchSummary | None
    parent: str | None
    fork_seq: int
    harness: str
    runs: StoredEvent | None
    """The InterventionProposed this branch runs (None: not an intervention branch)."""
    evaluations: list[StoredEvent] = field(default_factory=list)
    trainings: list[StoredEvent] = field(default_factory=list)
    curves: list[tuple[str, list[tuple[float, float]]]] = field(default_factory=list)
    diagnoses: list[StoredEvent] = field(default_factory=list)
    proposals: list[StoredEvent] = field(default_factory=list)
    decisions: list[list[str]] = field(default_factory=list)
    running: list[tuple[Any, ...]] = field(default_factory=list)
    events: int = 0


def branch(store: EventStore, ref: BranchRef) -> Branch:
    """A branch's own record: evaluations per policy version, training curves, diagnoses
    with their findings, the interventions proposed on it and the decisions about it."""
    from evotrainer.evolve.promotion import incumbent_of, intervention_of, own_events
    from evotrainer.harness.versions import harness_of
    from evotrainer.store.audit import describe_decision, promotion_decisions

    info = store.branch(ref)  # NotFoundError for a missing branch
    history = store.read_branch(ref)
    own = own_events(history, ref)
    incumbent = str(incumbent_of(store, ref.experiment))
    summary = summaries(store.conn, ref.experiment, {incumbent}).get(str(ref))
    out = Branch(ref, summary, str(info.parent) if info.parent else None, info.fork_seq, harness_of(history).address,
                 intervention_of(history, ref), events=len(history))  # fmt: skip
    for event in own:
        if event.type == "EvaluationRecorded":
            out.evaluations.append(event)
        elif event.type == "TrainingCompleted":
            out.trainings.append(event)
        elif event.type == "DiagnosisRecorded":
            out.diagnoses.append(event)
        elif event.type == "InterventionProposed":
            out.proposals.append(event)
    out.curves = [(title, step_points(out.trainings, key)) for title, key in CURVES]
    out.decisions = [describe_decision(d) for d in promotion_decisions(store, ref)
                     if d.payload["candidate"] == str(ref)]  # fmt: skip
    out.running = store.conn.execute(RUNNING_TASKS, (ref.experiment, ref.branch, ref.branch)).fetchall()
    return out


def step_points(trainings: list[StoredEvent], key: str) -> list[tuple[float, float]]:
    """(step, value) of one metric over the branch's training runs, run after run: a later
    run's steps continue where the one before it ended."""
    points: list[tuple[float, float]] = []
    offset = 0
    for event in trainings:
        last = 0
        for metrics in event.payload.get("step_metrics", []):
            if isinstance(metrics.get(key), int | float) and isinstance(metrics.get("step"), int | float):
                points.append((offset + float(metrics["step"]), float(metrics[key])))
                last = max(last, int(metrics["step"]))
        offset += max(last, int(event.payload.get("steps", 0)))
    return points


@dataclass(frozen=True)
class Rollout:
    position: int
    record: Any  # evotrainer.evidence.RolloutRecord


def rollouts(store: EventStore, ref: BranchRef, evidence: str, positions: list[int]) -> list[Rollout]:
    """The rollouts a finding points at (0-based lines of the evidence artifact), when the
    evidence is one a diagnosis of this branch read and the artifact store holds it."""
    from evotrainer.artifacts import open_store
    from evotrainer.evidence import from_jsonl

    diagnosed = {e.payload["evidence"] for e in store.read_branch(ref) if e.type == "DiagnosisRecorded"}
    if evidence not in diagnosed:
        raise NotFoundError(f"no diagnosis of {ref} read evidence {evidence[:12]}")
    artifacts = open_store()
    if not artifacts.exists(evidence):
        raise NotFoundError(f"evidence {evidence[:12]} is not in this machine's artifact store")
    records = from_jsonl(artifacts.get(evidence))
    return [Rollout(i, records[i]) for i in positions if 0 <= i < len(records)]


@dataclass(frozen=True)
class Intervention:
    experiment: str
    proposal: StoredEvent
    backtests: list[StoredEvent]
    outcomes: list[dict[str, Any]]
    branches: list[str]
    skill: Any  # evotrainer.evolve.skills.Skill | None
    skill_id: str


def intervention(store: EventStore, experiment: str, intervention_id: str) -> Intervention:
    """An intervention: its hypothesis and criterion, backtests, the branches that ran it,
    the gate's decisions about them, and the skill its outcome fed."""
    from evotrainer.evolve.skills import direction, skill_id, skill_library, trigger_of

    check_name("experiment", experiment)
    row = store.conn.execute(
        "SELECT branch, seq FROM projections.interventions WHERE experiment = %s AND intervention_id = %s"
        " ORDER BY position LIMIT 1", (experiment, intervention_id)).fetchone()  # fmt: skip
    if row is None:
        raise NotFoundError(f"no intervention {intervention_id} in {experiment}")
    where = BranchRef(experiment, row[0])
    history = store.read_branch(where)
    proposal = next(e for e in history if e.seq == row[1] and e.branch == row[0])
    backtests = [e for e in history
                 if e.type == "BacktestCompleted" and e.payload["intervention_id"] == intervention_id]  # fmt: skip
    cursor = store.conn.execute(
        "SELECT candidate, decision, baseline_score, candidate_score, margin, reason, blocking_findings"
        " FROM promotion_audit WHERE experiment = %s AND intervention_id = %s ORDER BY position",
        (experiment, intervention_id),
    )
    names = [c.name for c in cursor.description or []]
    outcomes = [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]
    ran = [ref for ref, _, iv in store.conn.execute(FORK_EDGES, (experiment,)) if iv == intervention_id]
    p = proposal.payload
    sid = skill_id(trigger_of(history, proposal), p["field"], direction(p.get("old_value"), p["new_value"]))
    skill = skill_library(store, [experiment]).skills.get(sid)
    return Intervention(experiment, proposal, backtests, outcomes, sorted(ran), skill, sid)


def skills(store: EventStore) -> list[Any]:
    from evotrainer.evolve.skills import skill_library

    return sorted(skill_library(store).skills.values(), key=lambda s: (-s.successes, s.failures, s.skill_id))


def comparisons(store: EventStore) -> list[StoredEvent]:
    """Every ComparisonRecorded (`evotrainer compare`), newest first."""
    from evotrainer.store.records import row_to_event
    from evotrainer.store.sql import SELECT_EVENTS

    rows = store.conn.execute(SELECT_EVENTS + " WHERE e.type = 'ComparisonRecorded' ORDER BY e.position DESC")
    return [row_to_event(r) for r in rows.fetchall()]


@dataclass(frozen=True)
class Audit:
    ref: BranchRef
    report: Any  # evotrainer.store.audit.AuditReport
    anchors: list[Any]
    anchor_problems: list[Any]
    decisions: list[list[str]]


def audit(store: EventStore, ref: BranchRef) -> Audit:
    """`evotrainer audit REF --promotions`: the chains of the branch and its ancestors, its
    signed anchors (checked against this machine's trusted keys), every decision with its
    evidence."""
    from evotrainer.store.anchors import stored_anchors, trusted_keys, verify_signed_anchors
    from evotrainer.store.audit import audit as audit_chains
    from evotrainer.store.audit import describe_decision, promotion_decisions

    store.branch(ref)
    report = audit_chains(store, ref)
    signed = [a for a in stored_anchors(store, ref.experiment) if a.branch in report.heads]
    problems = verify_signed_anchors(store, signed, trusted_keys())
    decisions = [describe_decision(d) for d in promotion_decisions(store, ref)]
    return Audit(ref, report, signed, problems, decisions)


def harness_diff(store: EventStore, a: BranchRef, b: BranchRef) -> tuple[Any, Any, list[tuple[str, Any, Any]]]:
    """`evotrainer harness diff A B`: both harnesses and the fields that differ."""
    from evotrainer.harness.spec import diff
    from evotrainer.harness.versions import branch_harness

    left, right = branch_harness(store, a), branch_harness(store, b)
    return left, right, diff(left.spec, right.spec)
