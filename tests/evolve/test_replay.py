"""Computation replay (`evotrainer replay REF`): a branch's recorded tasks, run again, give
the same outputs hash for hash; a recorded output no computation gives is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from evotrainer.evolve.controller import run_experiment
from evotrainer.evolve.experiment_config import ExperimentConfig
from evotrainer.fleet.replay import first_difference, recorded_tasks
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, NewEvent
from tests.test_cli import run

TINY = {"grpo": {"max_steps": 2, "num_generations": 4, "prompts_per_step": 2},
        "evaluation": {"k": 2, "eval_tasks": 4}}  # fmt: skip


@pytest.mark.slow
def test_a_branch_replays_hash_for_hash_and_a_forged_result_is_named(
    store: EventStore, cli_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("EVOTRAINER_HOME", cli_env["EVOTRAINER_HOME"])  # the CLI's artifact store too
    monkeypatch.delenv("EVOTRAINER_BROKER_URL", raising=False)
    run_experiment(store, ExperimentConfig(name="re", iterations=1, harness=TINY))
    candidate = next(info.ref for info in store.branches("re") if info.name != "main")
    kinds = [request.payload["kind"] for request, _ in recorded_tasks(store.read_branch(candidate))]
    assert kinds[:3] == ["train", "evaluate", "diagnose"] and kinds.count("train") == 2  # main's, then its own

    replayed = run(cli_env, "replay", str(candidate))
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout.splitlines()[-1].startswith(f"identical: {len(kinds)} tasks re-executed")
    assert "train" in replayed.stdout and "policy " in replayed.stdout

    # A result appended by hand as if a task had produced it: no computation gives it.
    main = BranchRef("re", "main")
    request, (recorded,) = next((r, caused) for r, caused in recorded_tasks(store.read_branch(main))
                                if r.payload["kind"] == "evaluate")  # fmt: skip
    forged = store.append(main, [NewEvent("TaskRequested", {**request.payload, "task_id": "forged"})])[0]
    store.append(main, [
        NewEvent("EvaluationRecorded", {**recorded.payload, "avg_at_k": 0.99}, causation_id=forged.event_id),
        NewEvent("TaskCompleted", {"task_id": "forged", "worker": "w:1", "attempt": 1, "duration_s": 1.0},
                 causation_id=forged.event_id),
    ])  # fmt: skip
    caught = run(cli_env, "replay", "re/main")
    assert caught.returncode == 1, caught.stderr
    last = caught.stdout.splitlines()[-1]
    assert last.startswith(f"re/main@{forged.seq} evaluate forged: DIFFERENT: EvaluationRecorded")
    assert "avg_at_k: 0.99 recorded" in last


def test_nothing_to_replay_is_said_and_a_bad_ref_is_one_line(store: EventStore, cli_env: dict[str, str]) -> None:
    store.create_experiment("empty")
    quiet = run(cli_env, "replay", "empty/main")
    assert (quiet.returncode, quiet.stdout.strip()) == (0, "nothing to replay: empty/main records no completed "
                                                           "train, evaluate, diagnose, backtest task")  # fmt: skip
    missing = run(cli_env, "replay", "empty/nope")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "no branch empty/nope" in missing.stderr


def test_the_first_difference_is_named_by_its_path() -> None:
    assert first_difference({"a": [1, {"b": 2}]}, {"a": [1, {"b": 3}]}) == "a.1.b: 2 recorded, 3 now"
    assert first_difference({"a": 1}, {"a": 1, "c": 2}) == "c: only now"
    assert first_difference({"x": [1, 2]}, {"x": [1, 2]}) is None
