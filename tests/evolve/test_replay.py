"""Computation replay (`evotrainer replay REF`): a branch's recorded tasks, run again, give
the same outputs hash for hash; a recorded output no computation gives is named, and so is a
result that no task or command produced."""

from __future__ import annotations

from pathlib import Path

import pytest

from evotrainer.evolve.controller import run_experiment
from evotrainer.evolve.experiment_config import ExperimentConfig
from evotrainer.fleet import request_task, run_in_process
from evotrainer.fleet.replay import first_difference, recorded_tasks
from evotrainer.harness.versions import versioned_event
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
    kinds = [task.request.payload["kind"] for task in recorded_tasks(store.read_branch(candidate))]
    # main's evaluation of the untrained start, then the candidate's own run.
    assert kinds == ["evaluate", "train", "evaluate", "diagnose"]

    replayed = run(cli_env, "replay", str(candidate))
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr[-300:]
    assert replayed.stdout.splitlines()[-1].startswith(f"identical: {len(kinds)} tasks re-executed")
    assert "train" in replayed.stdout and "policy " in replayed.stdout

    main = BranchRef("re", "main")
    own = [e for e in store.read_branch(candidate) if e.branch == candidate.branch]
    evidence = next(e.payload["evidence_sha256"] for e in own if e.type == "RolloutsRecorded")
    # A second diagnosis of the same evidence under the same harness: its append keeps the
    # first one, so it wrote nothing of its own to check.
    request_task(store, candidate, "diagnose", "diagnose-again", {"evidence": evidence})
    run_in_process(store)
    assert not [e for e in store.read_branch(candidate) if e.causation_id and e.type == "DiagnosisRecorded"
                and e.payload["evidence"] == evidence][1:]  # fmt: skip
    # One under a new harness, with an evaluation appended after it was requested and
    # before it ran: replay reads the branch as the task saw it, not as it was requested.
    stricter = ExperimentConfig(name="re", harness=TINY).starting_harness().with_field(
        "diagnostics.dead_group_ratio.warning", 0.2)
    store.append(candidate, [versioned_event(stricter, parent=None, changed_fields=[])])
    request_task(store, candidate, "diagnose", "diagnose-later", {"evidence": evidence})
    evaluation = next(e for e in reversed(store.read_branch(candidate)) if e.type == "EvaluationRecorded")
    forged_score = store.append(candidate, [NewEvent("EvaluationRecorded", {**evaluation.payload, "avg_at_k": 0.5})])[0]
    run_in_process(store)
    # That evaluation, appended by hand, no task or command produced: replay names it and fails.
    again = run(cli_env, "replay", str(candidate))
    assert again.returncode == 1, again.stdout + again.stderr
    assert "diagnose diagnose-again: identical" in again.stdout
    assert "diagnose diagnose-later: identical" in again.stdout
    assert (f"{candidate}@{forged_score.seq} EvaluationRecorded: UNVERIFIABLE: no task or command produced it"
            in again.stdout.splitlines())  # fmt: skip
    assert again.stdout.splitlines()[-1] == f"UNVERIFIABLE: 1 results in {candidate} that no task or command produced"
    allowed = run(cli_env, "replay", str(candidate), "--allow-unverified")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr

    # A result appended by hand as if a task had produced it: no computation gives it.
    task = next(t for t in recorded_tasks(store.read_branch(main)) if t.request.payload["kind"] == "evaluate")
    request = task.request
    recorded = next(e for e in task.caused if e.type == "EvaluationRecorded")
    forged = store.append(main, [NewEvent("TaskRequested", {**request.payload, "task_id": "forged"})])[0]
    checkpoint = next(e for e in task.caused if e.type == "PolicyCheckpointed")
    store.append(main, [
        NewEvent("PolicyCheckpointed", checkpoint.payload, causation_id=forged.event_id),
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


def test_a_task_that_cannot_run_again_here_is_one_line_exit_2(store: EventStore, cli_env: dict[str, str]) -> None:
    store.create_experiment("gone")
    main = BranchRef("gone", "main")
    # Trained from a checkpoint this artifact store does not hold.
    requested = store.append(main, [NewEvent("TaskRequested", {
        "task_id": "t-gone", "kind": "train", "queue": "train",
        "inputs": {"domain": "math:digit_add", "policy": "0" * 64}})])[0]  # fmt: skip
    store.append(main, [NewEvent("TaskCompleted", {"task_id": "t-gone", "worker": "w:1", "attempt": 1,
                                                   "duration_s": 1.0}, causation_id=requested.event_id)])  # fmt: skip
    result = run(cli_env, "replay", "gone/main")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("evotrainer: error: cannot replay gone/main@2 train t-gone:")
    assert result.stderr.count("\n") == 1
