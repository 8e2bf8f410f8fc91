"""Projections: query-friendly tables derived from the event log, and their rebuild.

    Projector(store).catch_up()                 # bring `projections.*` up to date
    rebuild(store, "replay_x", upto=position)   # the same tables, from scratch

One code path fills both the live tables (a Subscription, so the checkpoint commits with
the rows) and a scratch rebuild, batch by batch in the global order. Every update is
order-preserving and idempotent per batch, so the result does not depend on how the log
was cut into batches: that is what makes a rebuild byte-identical to the live copy.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from evotrainer.artifacts.references import artifact_fields
from evotrainer.store import EventStore, GlobalPosition, StoredEvent
from evotrainer.store.batch import already_json
from evotrainer.store.subscription import Subscription

LIVE_SCHEMA = "projections"
SUBSCRIPTION = "projections"
DDL_FILE = Path(__file__).resolve().parents[2] / "lineage" / "projections.sql"
TABLES = (
    "branch_state", "policies", "harness_versions", "diagnoses", "interventions", "backtests",
    "evaluations", "promotions", "skills", "imported_skills", "tasks", "artifacts",
)
PRIMARY_KEYS = {
    "branch_state": ("experiment", "branch"),
    "tasks": ("experiment", "branch", "task_id"),
    "artifacts": ("sha256",),
}

# Per-event tables: (table, columns taken from the payload, with renames old -> new).
_EVENT_TABLES: dict[str, tuple[str, dict[str, str]]] = {
    "PolicyCheckpointed": ("policies", {k: k for k in (
        "policy_sha256", "parent_sha256", "kind", "parameters", "size_bytes", "source")}),
    "HarnessVersioned": ("harness_versions", {"harness_hash": "harness_hash", "parent_hash": "parent_hash",
                                              "changed_fields": "changed_fields", "spec": "spec"}),
    "DiagnosisRecorded": ("diagnoses", {"evidence": "evidence_sha256", "harness_hash": "harness_hash",
                                        "conditions": "conditions", "blocking": "blocking", "findings": "findings"}),
    "InterventionProposed": ("interventions", {k: k for k in (
        "intervention_id", "field", "old_value", "new_value", "hypothesis", "success_criterion",
        "rollback_plan", "proposer")}),
    "BacktestCompleted": ("backtests", {"intervention_id": "intervention_id", "kind": "kind",
                                        "evidence": "evidence_sha256", "passed": "passed", "figures": "figures",
                                        "criterion": "criterion"}),
    "EvaluationRecorded": ("evaluations", {k: k for k in (
        "policy_sha256", "metric", "avg_at_k", "pass_at_k", "k", "problems", "results_sha256")}),
    "PromotionDecided": ("promotions", {k: k for k in (
        "candidate", "decision", "baseline_score", "candidate_score", "margin", "blocking_findings",
        "intervention_id", "reason")}),
    "SkillRecorded": ("skills", {k: k for k in (
        "skill_id", "trigger", "intervention", "expected_outcome", "category", "domains", "successes",
        "failures", "effect_size")}),
    # `origin`: the payload's `source` (file, its sha256, where it was exported from), a JSON
    # column; `source` names a text column elsewhere (policies).
    "SkillImported": ("imported_skills", {**{k: k for k in (
        "skill_id", "trigger", "intervention", "expected_outcome", "category", "successes", "failures",
        "effect_sizes", "validated_in", "tried_in", "change")}, "source": "origin"}),
}
_JSON_COLUMNS = {"changed_fields", "spec", "conditions", "findings", "old_value", "new_value", "figures",
                 "blocking_findings", "domains", "effect_sizes", "validated_in", "tried_in", "change", "origin"}


def create_schema(conn: psycopg.Connection[Any], schema: str) -> None:
    conn.execute(DDL_FILE.read_text(encoding="utf-8").replace("{schema}", schema))  # type: ignore[arg-type]


@dataclass
class _Batch:
    """What one batch of events changes, folded in order before anything is written."""

    rows: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict)
    heads: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    scores: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    statuses: dict[tuple[str, str], str] = field(default_factory=dict)
    task_requests: list[tuple[Any, ...]] = field(default_factory=list)
    task_outcomes: list[tuple[Any, ...]] = field(default_factory=list)
    artifacts: dict[str, tuple[Any, ...]] = field(default_factory=dict)

    def add(self, e: StoredEvent) -> None:
        key = (e.experiment, e.branch)
        head = self.heads.setdefault(key, {"events": 0, "parent": None, "fork_seq": None})
        head.update(head_seq=e.seq, head_hash=e.hash, head_position=e.position)
        head["events"] += 1
        p = e.payload
        if e.type == "BranchForked":
            head.update(parent=p["parent"], fork_seq=p["fork_seq"])
        table = _EVENT_TABLES.get(e.type)
        if table is not None:
            name, columns = table
            values = [
                orjson.dumps(p.get(src)).decode() if dst in _JSON_COLUMNS else p.get(src)
                for src, dst in columns.items()
            ]
            self.rows.setdefault(name, []).append((e.position, e.experiment, e.branch, e.seq, *values))
        if e.type == "EvaluationRecorded" and p.get("avg_at_k") is not None:
            self.scores.setdefault(key, []).append(float(p["avg_at_k"]))
        elif e.type == "PromotionDecided":
            candidate = str(p["candidate"]).partition("/")
            self.statuses[(candidate[0], candidate[2])] = p["decision"]
        elif e.type == "TaskRequested":
            self.task_requests.append((e.experiment, e.branch, p["task_id"], p.get("kind"), p.get("queue"),
                                       e.seq, e.position))
        elif e.type in ("TaskCompleted", "TaskFailed"):
            status = "completed" if e.type == "TaskCompleted" else ("retrying" if p.get("retryable") else "failed")
            self.task_outcomes.append((status, p.get("attempt", 1), p.get("worker"), e.position,
                                       p.get("error_class"), e.experiment, e.branch, p["task_id"]))
        for path, sha in artifact_fields(p):
            if sha not in self.artifacts:
                # The role is what the first referencing field calls it: policy, evidence, results, ...
                role = path.rpartition(".")[2].removesuffix("_sha256")
                self.artifacts[sha] = (sha, role, e.experiment, e.branch, e.seq, e.position)

    def write(self, conn: psycopg.Connection[Any], schema: str) -> None:
        s = sql.Identifier(schema)
        for table, rows in self.rows.items():
            with conn.cursor().copy(sql.SQL("COPY {}.{} FROM STDIN").format(s, sql.Identifier(table))) as copy:
                for row in rows:
                    copy.write_row(row)
        # Branch heads: this batch's last event wins; counts add up across batches.
        conn.cursor().executemany(
            sql.SQL(
                "INSERT INTO {}.branch_state AS b (experiment, branch, parent, fork_seq, head_seq, head_hash,"
                " head_position, events) VALUES (%s, %s, %s, coalesce(%s, 0), %s, %s, %s, %s)"
                " ON CONFLICT (experiment, branch) DO UPDATE SET head_seq = excluded.head_seq,"
                " head_hash = excluded.head_hash, head_position = excluded.head_position,"
                " events = b.events + excluded.events,"
                " parent = coalesce(b.parent, excluded.parent), fork_seq = greatest(b.fork_seq, excluded.fork_seq)"
            ).format(s),
            [(exp, br, h["parent"], h["fork_seq"], h["head_seq"], h["head_hash"], h["head_position"], h["events"])
             for (exp, br), h in self.heads.items()],
        )
        conn.cursor().executemany(
            sql.SQL("UPDATE {}.branch_state SET last_score = %s, best_score = greatest(best_score, %s)"
                    " WHERE experiment = %s AND branch = %s").format(s),
            [(scores[-1], max(scores), exp, br) for (exp, br), scores in self.scores.items()],
        )
        conn.cursor().executemany(
            sql.SQL("UPDATE {}.branch_state SET status = %s WHERE experiment = %s AND branch = %s").format(s),
            [(status, exp, br) for (exp, br), status in self.statuses.items()],
        )
        # Tasks are most of a fleet's log: one statement each for the batch's requests and
        # outcomes, not one per row (a statement per row was a third of a rebuild's time),
        # their rows sent as one JSON document (orjson's C beats psycopg's array dumping).
        if self.task_requests:
            conn.execute(sql.SQL(
                "INSERT INTO {}.tasks (experiment, branch, task_id, kind, queue, status, requested_seq,"
                " requested_position)"
                " SELECT r->>0, r->>1, r->>2, r->>3, r->>4, 'requested', (r->>5)::bigint, (r->>6)::bigint"
                "   FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS a(r, n)"
                "  ORDER BY a.n ON CONFLICT DO NOTHING"  # the first request of a task id stands
            ).format(s), (_json_rows(self.task_requests),))
        if self.task_outcomes:
            conn.execute(sql.SQL(
                "UPDATE {}.tasks t SET status = o.r->>0, attempts = greatest(t.attempts, (o.r->>1)::int),"
                " worker = o.r->>2, finished_position = (o.r->>3)::bigint, error_class = o.r->>4"
                "  FROM jsonb_array_elements(%s::jsonb) AS o(r)"
                " WHERE (t.experiment, t.branch, t.task_id) = (o.r->>5, o.r->>6, o.r->>7)"
            ).format(s), (_json_rows(_last_outcome_per_task(self.task_outcomes)),))
        conn.cursor().executemany(
            sql.SQL("INSERT INTO {}.artifacts VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING").format(s),
            list(self.artifacts.values()),
        )


def _json_rows(rows: list[tuple[Any, ...]]) -> Jsonb:
    """Rows as one JSON array of arrays, for jsonb_array_elements()."""
    return Jsonb(orjson.dumps(rows), dumps=already_json)


def _last_outcome_per_task(outcomes: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The batch's outcomes folded to one per task, as applying them one by one in order
    would leave the row: the last outcome's status, worker, position and error class, and
    the most attempts any of them names. (One UPDATE changes a row at most once.)"""
    folded: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for status, attempt, worker, position, error_class, *key in outcomes:
        earlier = folded.get(tuple(key))
        if earlier is not None and earlier[1] is not None:
            attempt = earlier[1] if attempt is None else max(attempt, earlier[1])
        folded[tuple(key)] = (status, attempt, worker, position, error_class, *key)
    return list(folded.values())


def apply(conn: psycopg.Connection[Any], schema: str, events: Iterable[StoredEvent]) -> None:
    batch = _Batch()
    for event in events:
        batch.add(event)
    batch.write(conn, schema)


class Projector:
    """Keeps the live projections in step with the log."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self.subscription = Subscription(store, SUBSCRIPTION)

    def catch_up(self, batch_size: int = 5000, timeout_s: float = 10.0) -> int:
        """Project every event committed before this call; returns how many were projected."""
        return self.subscription.catch_up(
            lambda conn, events: apply(conn, LIVE_SCHEMA, events), batch_size, timeout_s
        )

    def position(self) -> GlobalPosition:
        return self.subscription.position()


def rebuild(store: EventStore, schema: str, upto: GlobalPosition | None = None, batch_size: int = 5000) -> int:
    """Create `schema` and fill it from the whole log (up to `upto`); returns events read."""
    conn = store.conn
    with conn.transaction():
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        create_schema(conn, schema)
    after, total = GlobalPosition(), 0
    while True:
        events = store.read_all(after, batch_size)
        if upto is not None:
            events = [e for e in events if e.global_position <= upto]
        if not events:
            return total
        with conn.transaction():
            apply(conn, schema, events)
        total += len(events)
        after = events[-1].global_position
        if upto is not None and after >= upto:
            return total


@dataclass(frozen=True)
class ProjectionDifference:
    table: str
    key: str
    live: str | None
    rebuilt: str | None

    def __str__(self) -> str:
        return f"{self.table} row {self.key}: live {self.live or 'missing'} != rebuilt {self.rebuilt or 'missing'}"


def compare(conn: psycopg.Connection[Any], live: str, rebuilt: str) -> ProjectionDifference | None:
    """The first row (by table, then primary key) where two projection schemas differ."""
    for table in TABLES:
        keys = PRIMARY_KEYS.get(table, ("position",))
        order = sql.SQL(", ").join(sql.Identifier(k) for k in keys)
        query = sql.SQL("SELECT {}, row_to_json(t)::text FROM {}.{} t ORDER BY {}")
        rows = {}
        for schema in (live, rebuilt):
            rows[schema] = {
                tuple(r[:-1]): r[-1]
                for r in conn.execute(
                    query.format(order, sql.Identifier(schema), sql.Identifier(table), order)
                ).fetchall()
            }
        for key in sorted(set(rows[live]) | set(rows[rebuilt]), key=lambda k: tuple(map(str, k))):
            a, b = rows[live].get(key), rows[rebuilt].get(key)
            if a != b:
                return ProjectionDifference(table, "/".join(map(str, key)), a, b)
    return None
