"""The Python API (`import evotrainer`) on the real store: round trips, the CLI's errors as
typed exceptions with the CLI's own one-line messages, DataFrames, and a cheap import."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import evotrainer
from evotrainer.client.tables import MissingExtraError
from tests.store.test_audit import tamper
from tests.test_cli import EVOTRAINER, HEAVY_MODULES, run

TINY = {"grpo": {"max_steps": 2, "num_generations": 4, "prompts_per_step": 2},
        "evaluation": {"k": 2, "eval_tasks": 4}}  # fmt: skip


def task(i: int) -> dict[str, Any]:
    return {"task_id": f"t{i}", "kind": "noop", "queue": "q"}


@pytest.fixture
def db(database_url: str) -> Iterator[evotrainer.Client]:
    with evotrainer.connect(database_url, actor="api-test") as client:
        yield client


def test_create_append_fork_read_sql_and_audit(db: evotrainer.Client) -> None:
    main = db.create_experiment("demo", description="first", domain="math")
    assert (main.ref, main.head_seq, main.parent) == ("demo/main", 1, None)
    for i in range(3):
        db.append("demo/main", "TaskRequested", task(i), idempotency_key=f"k{i}")
    again = db.append("demo/main", "TaskRequested", task(0), idempotency_key="k0")
    assert again.seq == 2  # idempotent: the first append, not a new one
    alt = db.fork("demo/main@3", "alt", "try another way")
    assert (alt.parent, alt.fork_seq, alt.head_seq) == ("demo/main", 3, 4)
    db.append("demo/alt", "TaskRequested", task(9))

    events = db.events("demo/alt")
    assert [(e.branch, e.seq, e.type) for e in events] == [
        ("main", 1, "ExperimentCreated"), ("main", 2, "TaskRequested"), ("main", 3, "TaskRequested"),
        ("alt", 4, "BranchForked"), ("alt", 5, "TaskRequested")]  # fmt: skip
    assert [e.seq for e in db.events("demo/main@2")] == [1, 2]
    assert events[-1].payload["task_id"] == "t9" and events[-1].actor == "api-test"

    frame = events.to_pandas()
    assert list(frame.columns) == list(evotrainer.StoredEvent._fields) and len(frame) == 5
    assert frame["payload"].iloc[-1]["task_id"] == "t9"
    polars_frame = events.to_polars()
    assert polars_frame.shape == (5, len(evotrainer.StoredEvent._fields))

    (row,) = db.experiments()
    assert (row.experiment, row.domain, row.description) == ("demo", "math", "first")
    experiment = db.experiment("demo")
    assert [b.ref for b in experiment.branches] == ["demo/main", "demo/alt"]
    assert experiment.branches.to_pandas()["head_seq"].tolist() == [4, 5]

    heads = db.sql("SELECT branch, head_seq FROM branch_heads WHERE experiment = %s ORDER BY branch", ["demo"])
    assert heads.columns == ("branch", "head_seq") and heads.records() == [
        {"branch": "alt", "head_seq": 5}, {"branch": "main", "head_seq": 4}]  # fmt: skip
    assert db.sql("SELECT %(n)s::int AS n", {"n": 7}).rows == [(7,)]
    assert db.sql("SELECT child, fork_seq FROM lineage_edges").rows == [("alt", 3)]

    lineage = db.lineage("demo")
    assert [r.ref for r in lineage.branches] == ["demo/main", "demo/alt"]
    assert "└── alt @3  [running]  head 5" in str(lineage) and "digraph" in lineage.dot
    assert [(n["ref"], n["children"]) for n in lineage.to_json()] == [("demo/main", ["demo/alt"]), ("demo/alt", [])]

    audit = db.audit()
    assert audit.intact and (audit.branches, audit.events) == (2, 6)
    assert db.audit("demo/alt").heads["demo/alt"]["seq"] == 5
    tamper(db.store, "UPDATE events SET actor = 'mallory' WHERE seq = 2 AND branch_id = "
                     "(SELECT branch_id FROM branches WHERE name = 'main')")  # fmt: skip
    altered = db.audit("demo/alt")
    assert not altered.intact and str(altered.problems[0]).startswith("demo/main@2: ")
    assert altered.to_json()["first_problem"] == str(altered.problems[0])


def count_events(db: evotrainer.Client) -> int:
    return int(db.store.conn.execute("SELECT count(*) FROM events").fetchone()[0])


# Each: what the API is asked, the same through the CLI, and the error class it raises.
ERRORS: list[tuple[str, Callable[[evotrainer.Client], object], list[str], type[Exception]]] = [
    ("unknown branch", lambda db: db.events("demo/nope"), ["events", "list", "demo/nope"], evotrainer.NotFoundError),
    ("unknown experiment", lambda db: db.events("ghost/main"), ["log", "ghost/main"], evotrainer.NotFoundError),
    ("malformed ref", lambda db: db.branch("demo"), ["audit", "demo"], evotrainer.UsageError),
    ("ref with a seq where none goes", lambda db: db.audit("demo/main@1"), ["audit", "demo/main@1"],
     evotrainer.UsageError),
    ("bad SQL", lambda db: db.sql("SELECT * FROM no_such_table"), ["sql", "SELECT * FROM no_such_table"],
     evotrainer.UsageError),
    ("a write through sql", lambda db: db.sql("DELETE FROM events"), ["sql", "DELETE FROM events"],
     evotrainer.ReadOnlyViolation),
    ("a write hidden in a query", lambda db: db.sql("WITH x AS (DELETE FROM events RETURNING 1) SELECT * FROM x"),
     ["sql", "WITH x AS (DELETE FROM events RETURNING 1) SELECT * FROM x"], evotrainer.ReadOnlyViolation),
    ("two statements", lambda db: db.sql("SELECT 1; SELECT 2"), ["sql", "SELECT 1; SELECT 2"],
     evotrainer.ReadOnlyViolation),
    ("unknown event type", lambda db: db.append("demo/main", "NoSuchThing", {}),
     ["events", "append", "demo/main", "--type", "NoSuchThing", "--payload", "{}"], evotrainer.UsageError),
    ("fork onto a taken name", lambda db: db.fork("demo/main", "main"), ["fork", "demo/main", "main"],
     evotrainer.AlreadyExistsError),
    ("an intervention of two fields",
     lambda db: db.propose("demo/main", {"grpo.temperature": 1.1, "grpo.learning_rate": 0.1}, "h"),
     ["propose", "demo/main", "--set", "grpo.temperature=1.1", "--set", "grpo.learning_rate=0.1", "--hypothesis", "h"],
     evotrainer.UsageError),
    ("an unknown harness field", lambda db: db.propose("demo/main", {"nope": 1}, "h"),
     ["propose", "demo/main", "--set", "nope=1", "--hypothesis", "h"], evotrainer.UsageError),
    ("promoting the best so far", lambda db: db.promote("demo/main"), ["promote", "demo/main"],
     evotrainer.UsageError),
    ("diagnosing without evidence", lambda db: db.diagnose("demo/main"), ["diagnose", "demo/main"],
     evotrainer.NotFoundError),
]


@pytest.mark.parametrize(("case", "call", "args", "error"), ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_are_typed_and_say_what_the_cli_says(
    db: evotrainer.Client, cli_env: dict[str, str], case: str, call: Callable[[evotrainer.Client], object],
    args: list[str], error: type[Exception],
) -> None:
    db.create_experiment("demo")
    before = count_events(db)
    with pytest.raises(error) as raised:
        call(db)
    assert count_events(db) == before
    cli = run(cli_env, *args)
    assert isinstance(raised.value, evotrainer.EvotrainerError)
    assert cli.returncode == raised.value.exit_code == 2, (case, cli.stderr)
    assert cli.stderr == f"evotrainer: error: {raised.value}\n", (case, cli.stderr)
    assert count_events(db) == before


def test_a_bad_config_is_refused_before_anything_is_written(db: evotrainer.Client) -> None:
    with pytest.raises(evotrainer.UsageError, match="invalid experiment config: iterations"):
        db.run({"name": "x", "iterations": 0})
    with pytest.raises(evotrainer.UsageError, match="not int"):
        db.run(7)  # type: ignore[arg-type]
    with pytest.raises(evotrainer.UsageError, match="cannot read"):
        db.run("no/such/file.toml")
    assert db.experiments().rows == []


def test_a_missing_extra_is_named(db: evotrainer.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "polars", None)  # what an uninstalled module imports as
    with pytest.raises(MissingExtraError, match=r"pip install 'evotrainer\[polars\]'"):
        db.experiments().to_polars()


def test_import_is_cheap_and_every_public_name_resolves() -> None:
    code = ("import sys, evotrainer; heavy = sorted(m for m in sys.modules for h in HEAVY if m == h or "
            "m.startswith(h + '.')); loaded = sorted(m for m in sys.modules if m.startswith('evotrainer')); "
            "print(heavy, loaded)")  # fmt: skip
    python = str(Path(EVOTRAINER).parent / "python")
    done = subprocess.run([python, "-c", f"HEAVY = {(*HEAVY_MODULES, 'pandas', 'polars')!r}; {code}"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert done.stdout.strip() == "[] ['evotrainer', 'evotrainer.lazy_names']"  # lazy_names: the resolver, no imports
    from evotrainer import _WHERE

    assert sorted(evotrainer.__all__) == sorted(_WHERE)
    for name in evotrainer.__all__:
        assert getattr(evotrainer, name).__name__ == name
    with pytest.raises(AttributeError):
        evotrainer.no_such_name  # noqa: B018
    assert (Path(evotrainer.__file__).parent / "py.typed").exists()


@pytest.mark.slow
def test_a_tiny_run_into_dataframes_then_replayed(
    db: evotrainer.Client, cli_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVOTRAINER_HOME", cli_env["EVOTRAINER_HOME"])  # a fresh artifact store
    monkeypatch.delenv("EVOTRAINER_BROKER_URL", raising=False)
    lines: list[str] = []
    result = db.run({"name": "tiny", "iterations": 1, "harness": TINY}, say=lines.append)
    assert result.candidates == 1 and lines
    candidate = next(b.ref for b in db.experiment("tiny").branches if b.ref != "tiny/main")

    steps = db.training_metrics("tiny").to_pandas()
    assert set(steps["branch"]) == {candidate.split("/")[1]} and steps["step"].max() == 2
    assert "reward" in " ".join(steps["metric"])
    evaluations = db.evaluations("tiny")
    assert len(evaluations) >= 2 and {e.part for e in evaluations} == {"selection"}
    assert db.evaluations(candidate).to_pandas()["avg_at_k"].between(0, 1).all()

    audit = db.audit(candidate, promotions=True)
    assert audit.intact and [d.payload["candidate"] for d in audit.promotions] == [candidate]
    decided = db.sql("SELECT candidate, decision FROM promotion_audit").records()
    assert decided == [{"candidate": candidate, "decision": audit.promotions[0].payload["decision"]}]
    assert db.lineage("tiny").branches[1].status in {"incumbent", "rejected"}

    diagnosis = db.diagnose(candidate, record=False)
    assert diagnosis.rollouts > 0 and diagnosis.recorded_seq is None and len(diagnosis.findings) > 0
    proposal = db.propose(candidate, {"grpo.temperature": 1.3}, "If the temperature rises, groups spread")
    assert proposal.field == "grpo.temperature" and proposal.new_value == 1.3
    assert db.events(candidate)[-1].seq == proposal.recorded_seq
    promotion = db.promote(candidate, record=False)  # the gate again, on what is recorded: the same verdict
    assert (promotion.candidate, promotion.recorded_at) == (candidate, None)
    assert promotion.promoted == (audit.promotions[0].payload["decision"] == "promoted")
    forked = db.fork(candidate, "hotter", intervention=proposal.intervention_id)
    assert forked.parent == candidate and db.events(forked.ref)[-1].type == "HarnessVersioned"

    replay = db.replay(candidate)
    assert replay.identical and [r.kind for r in replay.tasks] == ["evaluate", "train", "evaluate", "diagnose"]
