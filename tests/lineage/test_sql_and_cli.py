"""`evotrainer sql` refuses anything that writes; lineage, log and replay from the CLI."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

from evotrainer.errors import UsageError
from evotrainer.lineage.projections import Projector
from evotrainer.lineage.readonly import READER_ROLE, ReadOnlyViolation, run_query
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, NewEvent
from tests.test_cli import run

WRITES = [
    "INSERT INTO branches (experiment, name) VALUES ('x', 'y')",
    "UPDATE events SET actor = 'x'",
    "DELETE FROM events",
    "TRUNCATE events",
    "CREATE TABLE evil (x int)",
    "DROP TABLE events",
    "ALTER TABLE events ADD COLUMN x int",
    "COPY events TO '/tmp/evotrainer-copy'",
    "COPY events FROM '/etc/passwd'",
    "SET ROLE postgres",
    "RESET ROLE",
    "GRANT ALL ON events TO PUBLIC",
    "SELECT 1; DELETE FROM events",
    "WITH gone AS (DELETE FROM events RETURNING 1) SELECT * FROM gone",
    "SELECT nextval('events_position_seq')",
    "SELECT set_config('role', 'postgres', true)",
    "SELECT pg_read_file('/etc/shadow')",
    "SELECT lo_import('/etc/passwd')",
    "SELECT pg_terminate_backend(pg_backend_pid())",
    "SELECT * FROM events FOR UPDATE",
    "EXPLAIN ANALYZE DELETE FROM events",
    "CALL something()",
    "DO $$ BEGIN DELETE FROM events; END $$",
    "",
]


@pytest.mark.parametrize("query", WRITES)
def test_writes_are_refused_and_nothing_changes(store: EventStore, query: str) -> None:
    store.create_experiment("exp")
    with pytest.raises(UsageError):
        run_query(store.conn, query)
    assert store.conn.execute("SELECT count(*) FROM events").fetchone()[0] == 1
    assert store.conn.execute("SELECT to_regclass('evil')").fetchone()[0] is None


HIDDEN_CALLS = [
    """SELECT "set_config"('role', 'postgres', true)""",
    """SELECT pg_catalog."pg_read_file"('/etc/shadow')""",
    "SELECT '--', set_config('role', 'postgres', true)",
    """SELECT $$'$$, "set_config"('role', 'postgres', true)""",
    "SELECT E'\\'', set_config('role', 'postgres', true) --'",
    "SELECT /* a /* nested */ comment */ set_config('role', 'postgres', true)",
]


@pytest.mark.parametrize("query", HIDDEN_CALLS)
def test_a_refused_function_is_found_however_it_is_written(store: EventStore, query: str) -> None:
    """Quoted names, and literals or comments that a naive filter reads wrongly, do not hide
    a call from the filter (the reader role and the read-only transaction are the layers
    behind it, not the only ones)."""
    with pytest.raises(ReadOnlyViolation, match=r"(set_config|pg_read_file)\(\) is refused"):
        run_query(store.conn, query)
    with pytest.raises(ReadOnlyViolation, match="unicode-escaped"):
        run_query(store.conn, 'SELECT U&"\\0073et_config"(1)')
    assert run_query(store.conn, "SELECT 'a--b', $$it's$$, \"x\"\"y\" FROM (SELECT 1 AS \"x\"\"y\") t -- end").rows == [
        ("a--b", "it's", 1)]


def test_queries_run_as_the_reader_role(store: EventStore) -> None:
    store.create_experiment("exp")
    result = run_query(store.conn, "SELECT current_user, count(*) FROM branch_history('exp/main')")
    assert result.rows == [(READER_ROLE, 1)] and result.role == READER_ROLE
    assert store.conn.execute("SELECT current_user").fetchone()[0] != READER_ROLE  # only for that query


def test_semicolons_inside_literals_are_fine(store: EventStore) -> None:
    assert run_query(store.conn, "SELECT 'a;b' AS x").rows == [("a;b",)]
    with pytest.raises(ReadOnlyViolation):
        run_query(store.conn, "SELECT 'a'; SELECT 'b'")


def test_a_slow_query_hits_the_statement_timeout(store: EventStore) -> None:
    with pytest.raises(UsageError, match="statement timeout"):
        run_query(store.conn, "SELECT pg_sleep(5)", timeout_ms=200)


def build_search(store: EventStore) -> None:
    """main, an intervention branch that is rejected, and one that is promoted."""
    store.create_experiment("exp", {"domain": "math"})
    main = BranchRef("exp", "main")
    store.append(main, [NewEvent("EvaluationRecorded", {
        "request": {}, "policy_sha256": "a" * 64, "metric": "avg@8", "avg_at_k": 0.30, "pass_at_k": 0.5, "k": 8,
        "problems": 32, "results_sha256": "b" * 64, "wall_seconds": 1.0})])
    for name, value, score, decision in [("temp-up", 1.2, 0.28, "rejected"), ("lr-down", 5e-4, 0.41, "promoted")]:
        iid = f"i-{name}"
        store.append(main, [NewEvent("InterventionProposed", {
            "intervention_id": iid, "field": "grpo.temperature" if name == "temp-up" else "grpo.learning_rate",
            "new_value": value, "hypothesis": "h", "success_criterion": "avg up 0.05", "rollback_plan": "drop branch"}),
            NewEvent("BacktestCompleted", {"intervention_id": iid, "kind": "reward", "evidence": "c" * 64,
                                           "figures": {"dead_groups_rescued": 3}, "passed": True})])
        store.fork(main, name)
        branch = BranchRef("exp", name)
        store.append(branch, [
            NewEvent("DiagnosisRecorded", {"evidence": "d" * 64, "findings": [], "conditions": ["insufficient_signal"]}),
            NewEvent("EvaluationRecorded", {
                "request": {}, "policy_sha256": "e" * 64, "metric": "avg@8", "avg_at_k": score, "pass_at_k": 0.6,
                "k": 8, "problems": 32, "results_sha256": "f" * 64, "wall_seconds": 1.0})])
        store.append(main, [NewEvent("PromotionDecided", {
            "candidate": f"exp/{name}", "decision": decision, "baseline_score": 0.30, "candidate_score": score,
            "margin": score - 0.30, "intervention_id": iid})])


def test_promotion_audit_joins_each_decision_with_its_evidence(store: EventStore) -> None:
    build_search(store)
    Projector(store).catch_up()
    rows = run_query(store.conn, "SELECT candidate, decision, intervention_field, backtests, evaluation, diagnoses"
                                 " FROM promotion_audit ORDER BY seq").rows
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("exp/temp-up", "rejected", "grpo.temperature"), ("exp/lr-down", "promoted", "grpo.learning_rate")]
    candidate, _, _, backtests, evaluation, diagnoses = rows[1]
    assert backtests == [{"kind": "reward", "passed": True, "figures": {"dead_groups_rescued": 3}}]
    assert evaluation["avg_at_k"] == 0.41
    assert diagnoses[0]["conditions"] == ["insufficient_signal"]
    artifacts = dict(run_query(store.conn, "SELECT sha256, role FROM projections.artifacts").rows)
    assert artifacts == {"a" * 64: "policy", "b" * 64: "results", "e" * 64: "policy", "f" * 64: "results"}


def test_lineage_log_and_replay_from_the_cli(store: EventStore, cli_env: dict[str, str]) -> None:
    build_search(store)
    tree = run(cli_env, "lineage", "exp").stdout.splitlines()
    assert tree[0] == "exp"
    assert any("temp-up @" in line and "[rejected]" in line for line in tree)
    # The decisions were appended by hand, without the gate's evidence: the record shows
    # them, but none makes a best so far, so main, where the search started, still is.
    assert any("lr-down @" in line and "[promoted]" in line and "avg 0.410" in line for line in tree), tree
    nodes = json.loads(run(cli_env, "lineage", "exp", "--json").stdout)
    assert {n["ref"]: (n["status"], n["incumbent"]) for n in nodes} == {
        "exp/main": ("incumbent", True), "exp/temp-up": ("rejected", False), "exp/lr-down": ("promoted", False)}
    assert 'digraph lineage' in run(cli_env, "lineage", "--dot").stdout
    log = json.loads(run(cli_env, "log", "exp/lr-down", "--json").stdout)
    assert log[-1]["type"] == "EvaluationRecorded" and log[-3]["type"] == "BranchForked"

    ok = run(cli_env, "replay", "exp/main", "--projections")
    assert ok.returncode == 0 and ok.stdout.startswith("identical:"), ok.stdout + ok.stderr
    store.conn.execute("UPDATE projections.branch_state SET status = 'promoted' WHERE branch = 'temp-up'")
    bad = run(cli_env, "replay", "exp/main", "--projections")
    assert bad.returncode == 1
    assert bad.stdout.startswith("DIFFERENT: branch_state row exp/temp-up"), bad.stdout

    csv_out = run(cli_env, "sql", "SELECT child, fork_seq FROM lineage_edges ORDER BY child", "--csv").stdout
    assert csv_out.splitlines()[0] == "child,fork_seq" and "lr-down," in csv_out
    refused = run(cli_env, "sql", "DELETE FROM events")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert run(cli_env, "lineage", "nope").returncode == 2
    # Computations: these results came from no task and no command, so replay cannot vouch for them.
    unverified = run(cli_env, "replay", "exp/lr-down")
    assert unverified.returncode == 1, unverified.stderr
    lines = unverified.stdout.splitlines()
    assert [line.split(": ")[0].split(" ")[1] for line in lines[:-2]] == [
        "EvaluationRecorded", "BacktestCompleted", "PromotionDecided", "BacktestCompleted", "DiagnosisRecorded",
        "EvaluationRecorded"]
    assert lines[0].startswith("exp/main@2 EvaluationRecorded: UNVERIFIABLE: no task or command produced it")
    assert "PromotionDecided: UNVERIFIABLE: recorded without the gate's evidence" in unverified.stdout
    assert lines[-2] == "nothing to replay: exp/lr-down records no completed train, evaluate, diagnose, backtest task"
    assert lines[-1] == "UNVERIFIABLE: 6 results in exp/lr-down that no task or command produced"
    allowed = run(cli_env, "replay", "exp/lr-down", "--allow-unverified")
    assert allowed.returncode == 0 and allowed.stdout.endswith("(allowed: --allow-unverified)\n"), allowed.stderr


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[2] / "lineage" / "queries").glob("*.sql")),
                         ids=lambda p: p.name)
def test_every_example_question_runs_read_only(store: EventStore, path: Path) -> None:
    build_search(store)
    Projector(store).catch_up()
    text = path.read_text()
    assert text.startswith("-- "), "each example query opens with the question it answers"
    result = run_query(store.conn, text)
    assert result.columns
    if path.name == "interventions_that_helped.sql":
        assert [(r[0], r[1]) for r in result.rows] == [("math", "grpo.learning_rate")]


def test_lineage_marks_the_best_so_far_and_work_in_flight(store: EventStore, cli_env: dict[str, str]) -> None:
    from evotrainer.fleet import request_task

    store.create_experiment("solo", {"domain": "math"})
    store.fork(BranchRef("solo", "main"), "open")
    tree = run(cli_env, "lineage", "solo").stdout.splitlines()
    assert tree[1].startswith("└── main  [incumbent]")  # nothing promoted: the start is the best so far
    assert tree[2].startswith("    └── open @1  [running]")  # not decided yet

    # A candidate the gate promoted (its evidence recorded as the tasks record theirs).
    from evotrainer.artifacts import open_store
    from evotrainer.evolve import fork_for_intervention, record_promotion
    from tests.evolve.builders import evaluate, propose, start, trained

    artifacts = open_store(Path(cli_env["EVOTRAINER_HOME"]) / "artifacts")
    main = start(store)
    evaluate(store, main, [0.5, 0.25] * 20, artifacts)
    fork_for_intervention(store, main, "lr-up", propose(store, main, "grpo.learning_rate", 2e-5))
    trained(store, BranchRef("demo", "lr-up"), "lr-up")
    evaluate(store, BranchRef("demo", "lr-up"), [0.75, 0.5] * 20, artifacts)
    assert record_promotion(store, BranchRef("demo", "lr-up"), artifacts)[0].promoted
    request_task(store, main, "noop", "noop-1")
    tree = run(cli_env, "lineage", "demo").stdout.splitlines()
    assert tree[1].startswith("└── main  [running]")  # not the incumbent, and a task in flight
    assert any("lr-up @" in line and "[incumbent]" in line for line in tree)


def test_a_task_retried_within_one_batch_is_projected_as_its_last_outcome(store: EventStore) -> None:
    """Outcomes are written one statement a batch: the row must end as applying them one
    by one would leave it, in the live projections and in a rebuild alike."""
    from evotrainer.lineage.projections import LIVE_SCHEMA, compare, rebuild

    store.create_experiment("retry")
    main = BranchRef("retry", "main")
    request = {"kind": "noop", "queue": "control", "inputs": {}}
    failed = {"worker": "w1", "error_class": "OSError", "message": "m", "traceback": "", "retryable": True}
    store.append(main, [
        NewEvent("TaskRequested", {"task_id": "r1", **request}),
        NewEvent("TaskFailed", {"task_id": "r1", "attempt": 2, **failed}),
        NewEvent("TaskCompleted", {"task_id": "r1", "worker": "w2", "attempt": 1, "outputs": {}, "duration_s": 0.1}),
        NewEvent("TaskRequested", {"task_id": "r2", **request}),
        NewEvent("TaskFailed", {"task_id": "r2", "attempt": 1, **failed}),
    ])
    # r3 is requested again later: the first request stands, and the outcome that comes
    # with the second applies; a request again with no outcome changes nothing.
    store.append(main, [NewEvent("TaskRequested", {"task_id": "r3", **request})])
    Projector(store).catch_up()
    store.append(main, [
        NewEvent("TaskRequested", {"task_id": "r3", **request, "kind": "other"}),
        NewEvent("TaskCompleted", {"task_id": "r3", "worker": "w3", "attempt": 1, "outputs": {}, "duration_s": 0.1}),
        NewEvent("TaskRequested", {"task_id": "r2", **request, "kind": "other"}),
    ])  # fmt: skip
    Projector(store).catch_up()
    rows = store.conn.execute(
        "SELECT task_id, kind, status, attempts, worker, error_class FROM projections.tasks"
        " WHERE experiment = 'retry' ORDER BY task_id").fetchall()
    assert rows == [("r1", "noop", "completed", 2, "w2", None), ("r2", "noop", "retrying", 1, "w1", "OSError"),
                    ("r3", "noop", "completed", 1, "w3", None)]  # fmt: skip
    try:
        for batch_size in (1, 2, 3, 5000):  # the same rows whatever the batches
            rebuild(store, "retry_rebuilt", batch_size=batch_size)
            assert compare(store.conn, LIVE_SCHEMA, "retry_rebuilt") is None, batch_size
    finally:
        store.conn.execute('DROP SCHEMA IF EXISTS "retry_rebuilt" CASCADE')


def test_a_rebuild_inside_a_callers_transaction_is_written_in_it(store: EventStore) -> None:
    """Batches are written on a second connection, which cannot see a schema created in the
    caller's open transaction: there the rebuild writes on the caller's own, and its rows
    go with the caller's rollback."""
    from evotrainer.lineage.projections import LIVE_SCHEMA, compare, rebuild

    store.create_experiment("inside")
    store.append(BranchRef("inside", "main"), [
        NewEvent("TaskRequested", {"task_id": f"t{i}", "kind": "noop", "queue": "control", "inputs": {}})
        for i in range(5)])  # fmt: skip
    Projector(store).catch_up()
    with pytest.raises(RuntimeError, match="rolled back"), store.transaction():
        assert rebuild(store, "inside_rebuilt", batch_size=2) >= 5
        assert compare(store.conn, LIVE_SCHEMA, "inside_rebuilt") is None
        raise RuntimeError("rolled back")
    assert store.conn.execute("SELECT to_regnamespace('inside_rebuilt')").fetchone() == (None,)


def test_a_write_that_fails_on_the_writers_connection_is_raised_and_stops_the_rebuild(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evotrainer.lineage import projections

    store.create_experiment("broken")
    store.append(BranchRef("broken", "main"), [
        NewEvent("TaskRequested", {"task_id": f"t{i}", "kind": "noop", "queue": "control", "inputs": {}})
        for i in range(20)])  # fmt: skip
    written: list[str] = []
    real_write = projections._Batch.write

    def third_fails(batch: projections._Batch, conn: psycopg.Connection[Any], schema: str) -> None:
        written.append(threading.current_thread().name)
        if len(written) == 3:
            conn.execute("SELECT 1/0")  # a statement the server refuses
        real_write(batch, conn, schema)

    monkeypatch.setattr(projections._Batch, "write", third_fails)
    try:
        with pytest.raises(psycopg.errors.DivisionByZero):
            projections.rebuild(store, "broken_rebuilt", batch_size=2)
        # Written on the writer's own thread, and nothing after the failure.
        assert written == ["projection-writer"] * 3
    finally:
        store.conn.execute('DROP SCHEMA IF EXISTS "broken_rebuilt" CASCADE')
