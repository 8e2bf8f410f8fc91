"""What the client returns: frozen dataclasses, and the row types of its tables.

Rows are named tuples (cheap to build by the hundred thousand, and DataFrames take them
as they are); everything else is a frozen dataclass. Nothing here imports more than the
standard library, so the CLI's reading commands can use the client without cost.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from evotrainer.client.tables import Table

if TYPE_CHECKING:
    from evotrainer.lineage.dag import LineageDAG
    from evotrainer.lineage.tree import BranchSummary
    from evotrainer.store import StoredEvent
    from evotrainer.store.audit import AuditProblem


class BranchRow(NamedTuple):
    ref: str
    parent: str | None
    fork_seq: int
    head_seq: int
    head_hash: str


class ExperimentRow(NamedTuple):
    experiment: str
    domain: str | None
    description: str | None
    created_at: datetime


class LineageRow(NamedTuple):
    ref: str
    parent: str | None
    fork_seq: int
    head_seq: int
    status: str
    """incumbent (the best so far), start, promoted, rejected, or running (not decided yet)."""
    last_score: float | None
    best_score: float | None


class EvaluationRow(NamedTuple):
    experiment: str
    branch: str
    seq: int
    policy_sha256: str
    metric: str
    avg_at_k: float
    pass_at_k: float
    k: int
    problems: int
    part: str | None
    """Which half of the held-out split: selection or test (None: the whole split)."""
    recorded_at: datetime


class TrainingStepRow(NamedTuple):
    """One metric of one GRPO step (long format: pivot on `metric` for one column each)."""

    experiment: str
    branch: str
    seq: int
    """The TrainingCompleted event's seq on its branch."""
    policy_sha256: str
    step: int
    metric: str
    value: float | None


class ReplayedRow(NamedTuple):
    at: str
    """EXPERIMENT/BRANCH@SEQ of the TaskRequested."""
    kind: str
    task_id: str
    identical: bool
    difference: str | None
    environment_changed: bool


class FindingRow(NamedTuple):
    layer: str
    metric: str
    value: float | None
    severity: str
    message: str


class SkillRow(NamedTuple):
    """One skill of the library: its outcomes summed over every experiment (imports included)."""

    skill_id: str
    trigger: str
    field: str
    direction: str
    category: str
    successes: int
    failures: int
    mean_effect: float | None
    validated_in: list[str]
    tried_in: list[str]
    general: bool
    """Validated in two or more domains: in the shared library."""
    imported: int
    """How many of its records came from skills files (SkillImported)."""


class PendingRow(NamedTuple):
    """A human gate's request nobody answered yet (DecisionRequested on EXPERIMENT/main)."""

    request_id: str
    """What approve, revise and abort name (d- and ten hex digits)."""
    experiment: str
    subject: str
    """proposal (a change to propose), intervention (one to run) or promotion."""
    branch: str
    why: str
    """Which autonomy rule asked for a human."""
    waits_for: str
    """One line: what waits, on which branch, and why (as `evotrainer pending` shows it)."""
    proposal: dict[str, Any] | None
    """The change on the table, if any."""
    details: dict[str, Any]
    """The evidence the request shows (a backtest's figures, the scores of a promotion)."""
    asked_at: datetime


@dataclass(frozen=True)
class Branch:
    """A branch and where its history stands."""

    ref: str
    experiment: str
    name: str
    parent: str | None
    fork_seq: int
    """Events inherited from the parent (0 for a main)."""
    head_seq: int
    head_hash: str


@dataclass(frozen=True)
class Experiment:
    name: str
    domain: str | None
    description: str
    config: dict[str, Any]
    created_at: datetime
    branches: Table[BranchRow]


@dataclass(frozen=True)
class Lineage:
    """The branch tree of one experiment (or of all)."""

    branches: Table[LineageRow]
    dag: LineageDAG
    lines: tuple[str, ...]
    """The tree as `evotrainer lineage` draws it."""
    dot: str
    """The tree as a Graphviz digraph."""
    summaries: dict[str, BranchSummary]

    def __str__(self) -> str:
        return "\n".join(self.lines)

    def to_json(self) -> list[dict[str, Any]]:
        """Each branch's summary with its children, as `evotrainer lineage --json` prints it."""
        from evotrainer.lineage.tree import as_json

        return as_json(self.dag, self.summaries)


@dataclass(frozen=True)
class Audit:
    """Whether every hash chain and signed anchor holds; the first bad event if not."""

    intact: bool
    branches: int
    events: int
    problems: tuple[AuditProblem, ...]
    """What is wrong where (str(): EXPERIMENT/BRANCH@SEQ: problem), first bad event first."""
    heads: dict[str, dict[str, Any]]
    """Each branch's head seq and hash: keep them to prove later that none was truncated."""
    signed_anchors: int
    promotions: tuple[StoredEvent, ...] = ()
    """PromotionDecided events of the lineage, with the evidence each decision cites
    (when asked for)."""

    def to_json(self) -> dict[str, Any]:
        return {"intact": self.intact, "branches": self.branches, "events": self.events,
                "first_problem": str(self.problems[0]) if self.problems else None,
                "problems": [asdict(p) for p in self.problems],
                "heads": self.heads, "signed_anchors": self.signed_anchors}  # fmt: skip


@dataclass(frozen=True)
class Replay:
    """Re-executed tasks of a branch, in order, up to the first that differs."""

    branch: str
    tasks: Table[ReplayedRow]

    @property
    def identical(self) -> bool:
        return all(row.identical for row in self.tasks)


@dataclass(frozen=True)
class Diagnosis:
    branch: str
    harness_hash: str
    evidence: str
    rollouts: int
    findings: Table[FindingRow]
    conditions: tuple[str, ...]
    """NAME: because -> suggestion."""
    blocking: bool
    recorded_seq: int | None
    details: dict[str, Any] = field(default_factory=dict)
    """The diagnosis as DiagnosisRecorded stores it."""


@dataclass(frozen=True)
class Proposal:
    intervention_id: str
    field: str
    old_value: Any
    new_value: Any
    hypothesis: str
    success_criterion: str
    candidate_hash: str
    """The harness the intervention would run under."""
    recorded_seq: int
    proposer: str = "human"
    """human (`propose`), mcp:<client> (an agent over MCP), or skill:ID (`propose_from_skills`)."""


@dataclass(frozen=True)
class Promotion:
    candidate: str
    promoted: bool
    reason: str
    recorded_at: str | None
    """EXPERIMENT/main@SEQ of PromotionDecided (None when not recorded)."""
    skill: str | None
    decision: dict[str, Any]
    """The PromotionDecided payload, evidence included."""


@dataclass(frozen=True)
class GateDecision:
    """The answer to a human gate's request (DecisionRecorded); the loop resumes from it."""

    request_id: str
    decision: str
    """approved, revised or aborted."""
    changes: dict[str, Any]
    """revised: the one FIELD: VALUE to run instead ({} otherwise)."""
    note: str
    actor: str
    """Who decided (an agent over MCP: mcp:<client name>)."""
    recorded_at: str
    """EXPERIMENT/main@SEQ of the DecisionRecorded."""
    request: str
    """What was decided: the request's one line (see PendingRow.waits_for)."""


@dataclass(frozen=True)
class RunResult:
    """What `run` ended with: the best so far and what the loop tried."""

    best: str
    best_score: float | None
    candidates: int
    promoted: int
    steps_spent: int


@dataclass(frozen=True)
class Comparison:
    """The loop against the fixed recipe: ComparisonRecorded's figures."""

    gain: float
    interval: tuple[float, float]
    loop_mean: float
    fixed_mean: float
    recorded_at: str
    seeds: Table[tuple[Any, ...]]
    """seed, fixed score, loop score, gain, loop steps (spent), loop policy steps (the GRPO
    steps its final policy carries; None in a comparison recorded before they were kept)."""
    payload: dict[str, Any]


@dataclass(frozen=True)
class Harness:
    """The harness a branch runs under."""

    ref: str
    address: str
    recorded_seq: int | None
    """Where it was recorded (None: the default spec, never recorded on this branch)."""
    spec: dict[str, Any]


@dataclass(frozen=True)
class HarnessDiff:
    a: str
    b: str
    """The two harness addresses."""
    changes: tuple[tuple[str, Any, Any], ...]
    """FIELD, value under a, value under b: each field whose value differs."""


@dataclass(frozen=True)
class Backtest:
    """An intervention replayed on stored evidence and judged against its criterion."""

    intervention_id: str
    kind: str
    evidence: str
    figures: dict[str, Any]
    criterion: str
    passed: bool
    held: tuple[str, ...]
    failed: tuple[str, ...]
    unchecked: tuple[str, ...]
    """Clauses a backtest cannot judge (they wait for training)."""
    recorded_seq: int | None


@dataclass(frozen=True)
class TaskOutcome:
    """A `train` or `evaluate` task: requested, and run here when there is no broker."""

    kind: str
    task_id: str
    branch: str
    requested_seq: int
    ran_here: bool
    """False when a broker is configured: a worker runs it (see `evotrainer tasks`)."""
    failure: str | None
    events: Table[StoredEvent]
    """The TaskRequested and every event the task appended."""
