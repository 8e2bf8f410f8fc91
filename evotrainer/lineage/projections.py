"""Projections: query-friendly tables derived from the event log, and their rebuild.

    Projector(store).catch_up()                 # bring `projections.*` up to date
    rebuild(store, "replay_x", upto=position)   # the same tables, from scratch

One code path fills both the live tables (a Subscription, so the checkpoint commits with
the rows) and a scratch rebuild, batch by batch in the global order. Every update is
order-preserving and idempotent per batch, so the result does not depend on how the log
was cut into batches: that is what makes a rebuild byte-identical to the live copy.
"""

from __future__ import annotations

import queue
import threading
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
from evotrainer.store.conninfo import conninfo_of
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


class _Head:
    """A branch's head as of a batch's last event of it, and how many events it added."""

    __slots__ = ("events", "fork_seq", "hash", "parent", "position", "seq")

    def __init__(self) -> None:
        self.events = 0
        self.parent: str | None = None
        self.fork_seq: int | None = None
        self.seq, self.hash, self.position = 0, "", 0


@dataclass
class _Batch:
    """What one batch of events changes, folded in order before anything is written."""

    rows: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict)
    heads: dict[tuple[str, str], _Head] = field(default_factory=dict)
    scores: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    statuses: dict[tuple[str, str], str] = field(default_factory=dict)
    task_requests: dict[tuple[str, str, str], tuple[Any, ...]] = field(default_factory=dict)
    """(experiment, branch, task id) -> the batch's first request: (kind, queue, seq, position)."""
    task_outcomes: dict[tuple[str, str, str], tuple[Any, ...]] = field(default_factory=dict)
    """(experiment, branch, task id) -> the outcomes folded as applying them in order
    would leave the row: (status, most attempts, worker, position, error class)."""
    artifacts: dict[str, tuple[Any, ...]] = field(default_factory=dict)

    def add(self, e: StoredEvent) -> None:
        # Called for every event of the log on a rebuild: attribute lookups are done once.
        key = (e.experiment, e.branch)
        head = self.heads.get(key)
        if head is None:
            head = self.heads[key] = _Head()
        head.seq, head.hash, head.position = e.seq, e.hash, e.position
        head.events += 1
        p, kind = e.payload, e.type
        table = _EVENT_TABLES.get(kind)
        if table is not None:
            name, columns = table
            values = [
                orjson.dumps(p.get(src)).decode() if dst in _JSON_COLUMNS else p.get(src)
                for src, dst in columns.items()
            ]
            self.rows.setdefault(name, []).append((e.position, e.experiment, e.branch, e.seq, *values))
        if kind == "TaskRequested":
            # The first request of a task id stands.
            self.task_requests.setdefault((e.experiment, e.branch, p["task_id"]),
                                          (p.get("kind"), p.get("queue"), e.seq, e.position))  # fmt: skip
        elif kind == "TaskCompleted" or kind == "TaskFailed":
            status = "completed" if kind == "TaskCompleted" else ("retrying" if p.get("retryable") else "failed")
            task = (e.experiment, e.branch, p["task_id"])
            attempt = p.get("attempt", 1)
            earlier = self.task_outcomes.get(task)
            if earlier is not None and earlier[1] is not None:
                attempt = earlier[1] if attempt is None else max(attempt, earlier[1])
            self.task_outcomes[task] = (status, attempt, p.get("worker"), e.position, p.get("error_class"))
        elif kind == "BranchForked":
            head.parent, head.fork_seq = p["parent"], p["fork_seq"]
        elif kind == "EvaluationRecorded" and p.get("avg_at_k") is not None:
            self.scores.setdefault(key, []).append(float(p["avg_at_k"]))
        elif kind == "PromotionDecided":
            candidate = str(p["candidate"]).partition("/")
            self.statuses[(candidate[0], candidate[2])] = p["decision"]
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
            [(exp, br, h.parent, h.fork_seq, h.seq, h.hash, h.position, h.events)
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
        # Tasks are most of a fleet's log. A task requested in this batch goes in with its
        # outcome from this batch already applied (most tasks end within the batch they
        # were requested in: one row written instead of a row and then its update); the
        # outcomes of tasks requested earlier update theirs. One statement each, not one
        # per row (a statement per row was a third of a rebuild's time), their rows sent as
        # one JSON document (orjson's C beats psycopg's array dumping).
        outcomes = dict(self.task_outcomes)
        if self.task_requests:
            rows = [(*task, *request, *(outcomes.pop(task, None) or _NO_OUTCOME))
                    for task, request in self.task_requests.items()]  # fmt: skip
            conn.execute(sql.SQL(
                "INSERT INTO {}.tasks AS t (experiment, branch, task_id, kind, queue, requested_seq,"
                " requested_position, status, attempts, worker, finished_position, error_class)"
                " SELECT r->>0, r->>1, r->>2, r->>3, r->>4, (r->>5)::bigint, (r->>6)::bigint,"
                "  coalesce(r->>7, 'requested'), greatest(0, (r->>8)::int), r->>9, (r->>10)::bigint, r->>11"
                "   FROM jsonb_array_elements(%s::jsonb) AS a(r)"
                # A task requested again keeps its first request; this batch's outcome applies.
                " ON CONFLICT (experiment, branch, task_id) DO UPDATE SET status = excluded.status,"
                "  attempts = greatest(t.attempts, excluded.attempts), worker = excluded.worker,"
                "  finished_position = excluded.finished_position, error_class = excluded.error_class"
                " WHERE excluded.finished_position IS NOT NULL"
            ).format(s), (_json_rows(rows),))
        if outcomes:
            conn.execute(sql.SQL(
                "UPDATE {}.tasks t SET status = o.r->>3, attempts = greatest(t.attempts, (o.r->>4)::int),"
                " worker = o.r->>5, finished_position = (o.r->>6)::bigint, error_class = o.r->>7"
                "  FROM jsonb_array_elements(%s::jsonb) AS o(r)"
                " WHERE (t.experiment, t.branch, t.task_id) = (o.r->>0, o.r->>1, o.r->>2)"
            ).format(s), (_json_rows([(*task, *outcome) for task, outcome in outcomes.items()]),))
        conn.cursor().executemany(
            sql.SQL("INSERT INTO {}.artifacts VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING").format(s),
            list(self.artifacts.values()),
        )


_NO_OUTCOME = (None, None, None, None, None)


def _json_rows(rows: list[tuple[Any, ...]]) -> Jsonb:
    """Rows as one JSON array of arrays, for jsonb_array_elements()."""
    return Jsonb(orjson.dumps(rows), dumps=already_json)


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
    """Create `schema` and fill it from the whole log (up to `upto`); returns events read.

    Each batch is written on a second connection by a thread of its own while this one
    reads and folds the next: the server writes one batch while Python decodes the next
    (the writer's Python is a few statements: it waits on the server, not the lock), 1.5x
    the events a second of writing on this connection (bench/lineage.py). `schema` is
    committed batch by batch; an error stops both and is raised. Inside a caller's
    transaction, whose schema no other connection can see, batches are written here."""
    conn = store.conn
    in_callers_transaction = store.in_transaction()
    with conn.transaction():
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        create_schema(conn, schema)
    after, total = GlobalPosition(), 0
    writer = (_InlineWriter(conn, schema) if in_callers_transaction
              else _BatchWriter(conninfo_of(store, "evotrainer-rebuild"), schema))  # fmt: skip
    with writer:
        while True:
            events = store.read_all(after, batch_size)
            if upto is not None:
                events = [e for e in events if e.global_position <= upto]
            if not events:
                break
            batch = _Batch()
            for event in events:
                batch.add(event)
            writer.put(batch)
            total += len(events)
            after = events[-1].global_position
            if upto is not None and after >= upto:
                break
    return total


class _InlineWriter:
    """Writes each batch on the reader's own connection, as soon as it is put."""

    def __init__(self, conn: psycopg.Connection[Any], schema: str) -> None:
        self.conn, self.schema = conn, schema

    def __enter__(self) -> _InlineWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def put(self, batch: _Batch) -> None:
        with self.conn.transaction():
            batch.write(self.conn, self.schema)


class _BatchWriter:
    """Writes folded batches, in order, each in its own transaction, on a connection and
    thread of its own; at most one batch waits while another is written."""

    def __init__(self, conninfo: str, schema: str) -> None:
        self.conninfo, self.schema = conninfo, schema
        self.queue: queue.Queue[_Batch | None] = queue.Queue(maxsize=1)
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="projection-writer", daemon=True)

    def __enter__(self) -> _BatchWriter:
        self.conn = psycopg.connect(self.conninfo, autocommit=True)
        self.thread.start()
        return self

    def put(self, batch: _Batch) -> None:
        self._raise_failure()
        self.queue.put(batch)

    def __exit__(self, *exc: object) -> None:
        self.queue.put(None)
        self.thread.join()
        self.conn.close()
        if exc[0] is None:
            self._raise_failure()

    def _raise_failure(self) -> None:
        if self.failure is not None:
            raise self.failure

    def _run(self) -> None:
        while (batch := self.queue.get()) is not None:
            if self.failure is not None:
                continue  # drain: the reader stops at its next put()
            try:
                with self.conn.transaction():
                    batch.write(self.conn, self.schema)
            except BaseException as exc:  # raised on the reader's thread
                self.failure = exc


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
