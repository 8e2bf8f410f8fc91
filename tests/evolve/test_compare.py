"""`evotrainer compare` on the real store with real (tiny) training, short: the loop and
the fixed recipe at equal steps over two seeds, scored on the test half, recorded once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evotrainer.client import Client
from evotrainer.errors import UsageError
from evotrainer.evolve.compare import candidates_within, compare
from evotrainer.evolve.experiment_config import ExperimentConfig
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore
from tests.test_cli import run

SHORT = {"grpo": {"max_steps": 3, "num_generations": 4, "prompts_per_step": 2, "learning_rate": 1e-4},
         "evaluation": {"k": 2, "eval_tasks": 12}}  # fmt: skip


@pytest.mark.slow
def test_compare_runs_both_arms_at_equal_steps_and_records_the_gain_once(store: EventStore) -> None:
    config = ExperimentConfig(name="cmp", domain="math:column_add", iterations=5, budget_steps=6,
                              train_tasks=64, harness=SHORT)  # fmt: skip
    lines: list[str] = []
    stored = compare(store, config, seeds=2, say=lines.append)
    p = stored.payload
    assert (stored.experiment, stored.branch, stored.type) == ("cmp-compare", "main", "ComparisonRecorded")
    assert [row["seed"] for row in p["seeds"]] == [0, 1] and p["budget_steps"] == 6
    for row in p["seeds"]:
        assert row["fixed"]["steps"] == 6 and 0 < row["loop"]["steps"] <= 6
        # What the final policies carry: the recipe's one run; the loop's promoted chunks only.
        assert row["fixed"]["trained_steps"] == 6
        # The loop's: every run in its best branch's history (the promoted chain, its
        # ancestors) and nothing a rejected candidate trained.
        best = store.read_branch(BranchRef(row["loop"]["experiment"], row["loop"]["branch"]))
        chain = sum(int(e.payload["steps"]) for e in best if e.type == "TrainingCompleted")
        assert row["loop"]["trained_steps"] == chain <= row["loop"]["steps"]
        assert row["fixed"]["experiment"] == f"cmp-s{row['seed']}-fixed"
        assert row["gain"] == pytest.approx(row["loop"]["score"] - row["fixed"]["score"])
    low, high = p["interval"]
    assert low <= p["gain"] <= high and p["problems"] == 12
    # The two seeds trained differently (the seed reaches the runs).
    assert p["seeds"][0]["fixed"]["policy"] != p["seeds"][1]["fixed"]["policy"]
    # Both arms were scored on the test half under the same protocol.
    for row in p["seeds"]:
        for arm in ("loop", "fixed"):
            ref = BranchRef(row[arm]["experiment"], row[arm]["branch"])
            evaluations = [e for e in store.read_branch(ref) if e.type == "EvaluationRecorded"
                           and e.payload["results_sha256"] == row[arm]["results_sha256"]]  # fmt: skip
            assert evaluations[-1].payload["request"]["part"] == "test"

    # Run again (a resumed compare): nothing new is trained or recorded.
    positions = {info.name: store.head(info.ref) for info in store.branches()}
    again = compare(store, config, seeds=2)
    assert again.event_id == stored.event_id
    assert {info.name: store.head(info.ref) for info in store.branches()} == positions

    # The Python API answers from the same record (a dict of the file's fields will do):
    # its figures are the event's, its table one row per seed; nothing new is written.
    client = Client(store)
    result = client.compare(config.model_dump(mode="json"), seeds=2)
    assert (result.gain, result.interval, result.recorded_at) == (p["gain"], (low, high), "cmp-compare/main@2")
    assert list(result.seeds.rows) == [(r["seed"], r["fixed"]["score"], r["loop"]["score"], r["gain"], r["loop"]["steps"],
                                        r["loop"]["trained_steps"]) for r in p["seeds"]]  # fmt: skip
    assert {info.name: store.head(info.ref) for info in store.branches()} == positions
    with pytest.raises(UsageError, match="at least 1 seed"):
        client.compare(config, seeds=0)


def test_a_files_candidate_cap_does_not_end_the_loop_before_its_step_budget() -> None:
    swe_like = ExperimentConfig(name="cap", domain="math:column_add", iterations=2, budget_steps=16,
                                harness={"grpo": {"max_steps": 8}})  # fmt: skip
    assert candidates_within(swe_like, 16) == 6  # two trained candidates, each with room for two second looks
    assert candidates_within(swe_like, 48) == 18  # --budget-steps 48: six trained candidates
    generous = swe_like.model_copy(update={"iterations": 40})
    assert candidates_within(generous, 48) == 40  # a larger cap in the file stands


@pytest.mark.slow
def test_compare_gives_the_loop_its_whole_step_budget_whatever_the_files_candidate_cap(store: EventStore) -> None:
    """A file capped at one candidate, compared at a budget of two: the loop still trains
    both, or the two arms would not be at equal steps."""
    config = ExperimentConfig(name="capped", domain="math:column_add", iterations=1, budget_steps=6,
                              train_tasks=64, harness=SHORT)  # fmt: skip
    row = compare(store, config, seeds=1).payload["seeds"][0]
    assert row["fixed"]["steps"] == row["loop"]["steps"] == 6


def test_compare_without_a_budget_is_one_line_and_writes_nothing(cli_env: dict[str, str], tmp_path: Path) -> None:
    path = tmp_path / "experiment.toml"
    path.write_text("name = 'nobudget'\n")
    result = run(cli_env, "compare", str(path), "--seeds", "2")
    assert result.returncode == 2 and "give the comparison a budget" in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1
    assert run(cli_env, "lineage").stdout.strip() in ("", "no experiments")


def test_compare_is_listed_in_sql(cli_env: dict[str, str], tmp_path: Path) -> None:
    path = tmp_path / "experiment.toml"
    path.write_text("name = 'tiny'\ndomain = 'math:column_add'\nbudget_steps = 2\niterations = 2\n"
                    "[harness.grpo]\nmax_steps = 2\nnum_generations = 2\nprompts_per_step = 1\n"
                    "[harness.evaluation]\nk = 1\neval_tasks = 4\n")  # fmt: skip
    result = run(cli_env, "compare", str(path), "--seeds", "1", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["budget_steps"] == 2
    listed = run(cli_env, "sql", "SELECT e.experiment, e.payload->>'gain' FROM branch_heads b, "
                 "branch_history(b.experiment || '/' || b.branch) e WHERE e.type = 'ComparisonRecorded'")
    assert "tiny-compare" in listed.stdout, listed.stdout


@pytest.mark.slow
def test_a_compare_whose_database_connections_are_cut_reconnects_and_finishes(
    cli_env: dict[str, str], tmp_path: Path, store: EventStore
) -> None:
    """pg_terminate_backend of every connection of `evotrainer compare` once its first
    evaluation is recorded: it says so in one line, connects again and resumes (the same
    as `evotrainer run`), never a psycopg traceback."""
    import subprocess
    import threading
    import time

    import psycopg

    from tests.test_cli import EVOTRAINER

    path = tmp_path / "experiment.toml"
    path.write_text("name = 'cut'\ndomain = 'math:column_add'\nbudget_steps = 2\niterations = 2\n"
                    "[harness.grpo]\nmax_steps = 2\nnum_generations = 2\nprompts_per_step = 1\n"
                    "[harness.evaluation]\nk = 1\neval_tasks = 4\n")  # fmt: skip
    cut: list[int] = []
    ours = store.conn.info.backend_pid

    def cut_at_the_first_evaluation() -> None:
        with psycopg.connect(cli_env["EVOTRAINER_DATABASE_URL"], autocommit=True) as watcher:
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline and not cut:
                row = watcher.execute("SELECT count(*) FROM events WHERE type = 'EvaluationRecorded'").fetchone()
                if row and row[0]:
                    cut.append(watcher.execute(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                        " WHERE datname = current_database() AND pid NOT IN (pg_backend_pid(), %s)",
                        (ours,)).fetchone()[0])  # fmt: skip
                time.sleep(0.1)

    watcher = threading.Thread(target=cut_at_the_first_evaluation)
    watcher.start()
    done = subprocess.run([EVOTRAINER, "compare", str(path), "--seeds", "1"], env=cli_env, capture_output=True,
                          text=True, timeout=600, check=False)  # fmt: skip
    watcher.join()
    assert cut and cut[0] >= 1, "the connections were never cut"
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert "lost the database connection (" in done.stdout and ": resuming from the log in 1 s" in done.stdout
    assert "recorded at cut-compare/main@" in done.stdout.splitlines()[-1]
    for info in store.branches():  # nothing recorded twice on any branch
        keys = [e.idempotency_key for e in store.read_branch(info.ref) if e.branch == info.name and e.idempotency_key]
        assert len(keys) == len(set(keys)), info.ref
