"""Drawing the lineage: a terminal tree (like `git log --graph`), JSON, or Graphviz dot."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import asdict, dataclass
from typing import Any

from evotrainer.lineage.dag import LineageDAG


@dataclass(frozen=True)
class BranchSummary:
    ref: str
    parent: str | None
    fork_seq: int
    head_seq: int
    status: str
    last_score: float | None
    best_score: float | None
    incumbent: bool = False
    proposer: str | None = None
    """Who proposed the intervention the branch was forked to test (None: no intervention)."""


def summaries(conn: Any, experiment: str | None, incumbents: Collection[str] = ()) -> dict[str, BranchSummary]:
    """Each branch's head and scores from the branch_state projection, with the status a
    person wants to see: `waiting` where the loop stopped for a human decision about the
    branch that nobody has answered yet (`evotrainer pending`), `incumbent` for the best so
    far (refs in `incumbents`), `start` for a main that is not it and has no task in flight,
    else the projection's own (promoted, rejected, or running: not decided yet)."""
    rows = conn.execute(
        "SELECT b.experiment || '/' || b.branch, b.parent, b.fork_seq, b.head_seq, b.status, b.last_score,"
        " b.best_score, EXISTS (SELECT 1 FROM projections.tasks t WHERE t.experiment = b.experiment"
        " AND t.branch = b.branch AND t.status IN ('requested', 'retrying')),"
        f" ({_PROPOSER})"
        " FROM projections.branch_state b WHERE %s::text IS NULL OR b.experiment = %s",
        (experiment, experiment),
    ).fetchall()
    waiting = {ref for (ref,) in conn.execute(_WAITING, (experiment, experiment)).fetchall()}
    out = {}
    for ref, parent, fork_seq, head_seq, status, last_score, best_score, busy, proposer in rows:
        if ref in waiting:
            status = "waiting"
        elif ref in incumbents:
            status = "incumbent"
        elif parent is None and status == "running" and not busy:
            status = "start"
        out[ref] = BranchSummary(ref, parent, fork_seq, head_seq, status, last_score, best_score, ref in incumbents,
                                 proposer)  # fmt: skip
    return out


# The proposer of the intervention a branch tests: fork_for_intervention records the
# branch's first HarnessVersioned as caused by the InterventionProposed.
_PROPOSER = (
    "SELECT i.payload ->> 'proposer' FROM branches c"
    " JOIN events h ON h.branch_id = c.branch_id AND h.seq > c.fork_seq AND h.type = 'HarnessVersioned'"
    " JOIN events i ON i.event_id = h.causation_id AND i.type = 'InterventionProposed'"
    " WHERE c.experiment = b.experiment AND c.name = b.branch ORDER BY h.seq LIMIT 1"
)


# The branches a human gate's open request is about: DecisionRequested on an experiment's
# main with no DecisionRecorded of the same request id. gates.open_requests' rule in SQL:
# the dashboard's lineage page of thousands of branches must not read main's events.
_WAITING = (
    "SELECT q.payload ->> 'branch' FROM branches m"
    " JOIN events q ON q.branch_id = m.branch_id AND q.type = 'DecisionRequested'"
    " WHERE m.name = 'main' AND (%s::text IS NULL OR m.experiment = %s) AND NOT EXISTS ("
    "  SELECT 1 FROM events a WHERE a.branch_id = m.branch_id AND a.type = 'DecisionRecorded'"
    "  AND a.payload ->> 'request_id' = q.payload ->> 'request_id')"
)


def _label(s: BranchSummary) -> str:
    score = f"  avg {s.last_score:.3f} (best {s.best_score:.3f})" if s.last_score is not None else ""
    fork = f" @{s.fork_seq}" if s.parent else ""
    # The rule engine proposes most changes; another proposer (a skill, a person) is named.
    by = f"  by {s.proposer}" if s.proposer and s.proposer != "builtin" else ""
    return f"{s.ref.partition('/')[2]}{fork}  [{s.status}]{by}  head {s.head_seq}{score}"


def render_tree(dag: LineageDAG, info: dict[str, BranchSummary]) -> list[str]:
    lines: list[str] = []
    experiments: dict[str, list[str]] = {}
    for root in dag.roots():
        experiments.setdefault(root.partition("/")[0], []).append(root)

    def walk(ref: str, prefix: str, last: bool) -> None:
        lines.append(f"{prefix}{'└── ' if last else '├── '}{_label(info[ref]) if ref in info else ref}")
        children = list(dag.node(ref).children)
        for i, child in enumerate(children):
            walk(child, prefix + ("    " if last else "│   "), i == len(children) - 1)

    for experiment, roots in sorted(experiments.items()):
        lines.append(experiment)
        for i, root in enumerate(roots):
            walk(root, "", i == len(roots) - 1)
    return lines


def render_dot(dag: LineageDAG, info: dict[str, BranchSummary]) -> str:
    colours = {"incumbent": "gold", "promoted": "palegreen", "rejected": "lightpink", "running": "lightgrey",
               "start": "lightgrey"}  # fmt: skip
    out = ["digraph lineage {", "  rankdir=LR;", "  node [shape=box, style=filled];"]
    for ref in dag.topological_order():
        s = info.get(ref)
        label = _label(s).replace('"', "'") if s else ref
        out.append(f'  "{ref}" [label="{label}", fillcolor={colours.get(s.status if s else "", "white")}];')
        node = dag.node(ref)
        if node.parent:
            out.append(f'  "{node.parent}" -> "{ref}" [label="@{node.fork_seq}"];')
    out.append("}")
    return "\n".join(out)


def as_json(dag: LineageDAG, info: dict[str, BranchSummary]) -> list[dict[str, Any]]:
    return [
        {**(asdict(info[ref]) if ref in info else {"ref": ref}), "children": list(dag.node(ref).children)}
        for ref in dag.topological_order()
    ]
