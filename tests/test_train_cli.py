"""Training and evaluation from the CLI, recorded as events whose artifacts audit can check."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from evotrainer.evolve.status import experiment_status
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore
from tests.test_cli import EVOTRAINER, run


@pytest.mark.slow
def test_train_then_evaluate_records_events_and_artifacts(cli_env: dict[str, str]) -> None:
    assert run(cli_env, "experiment", "create", "t", "--domain", "math", "--config", '{"domain": "math:digit_add"}'
               ).returncode == 0
    recorded = run(cli_env, "harness", "record", "t/main", "--spec", '{"grpo": {"max_steps": 2, "num_generations": 4}}')
    assert recorded.returncode == 0, recorded.stderr
    harness = recorded.stdout.split()[1]
    trained = run(cli_env, "train", "t/main", "--json")  # every setting from the branch's harness
    assert trained.returncode == 0, trained.stderr
    events = json.loads(trained.stdout)
    assert [e["type"] for e in events] == [
        "TaskRequested", "PolicyCheckpointed", "PolicyCheckpointed", "RolloutsRecorded", "TrainingCompleted",
        "TaskCompleted",
    ]
    request, base, policy, rollouts, training, completed = (e["payload"] for e in events)
    assert request["kind"] == "train" and completed["task_id"] == request["task_id"]
    assert completed["outputs"]["policy_sha256"] == policy["policy_sha256"]
    assert policy["parent_sha256"] == base["policy_sha256"] == training["base_policy_sha256"]
    assert rollouts["evidence_sha256"] == training["evidence_sha256"]
    assert training["harness_hash"] == rollouts["harness_hash"] == harness and training["steps"] == 2
    assert rollouts["summary"]["completions"] == 2 * 4 * 4

    overridden = json.loads(run(cli_env, "train", "t/main", "--steps", "1", "--json").stdout)
    again = next(e["payload"] for e in overridden if e["type"] == "TrainingCompleted")
    assert again["steps"] == 1 and again["harness_hash"] is None  # not the harness's settings any more
    assert again["base_policy_sha256"] == policy["policy_sha256"]  # 'latest' continues from the trained one

    evaluated = run(cli_env, "evaluate", "t/main", "--k", "2", "--tasks", "4", "--json")
    assert evaluated.returncode == 0, evaluated.stderr
    evaluation = next(e["payload"] for e in json.loads(evaluated.stdout) if e["type"] == "EvaluationRecorded")
    assert evaluation["policy_sha256"] == again["policy_sha256"]  # 'latest' is the newest checkpoint
    assert run(cli_env, "audit", "--artifacts").returncode == 0

    evidence = next(Path(cli_env["EVOTRAINER_HOME"], "artifacts", "objects").rglob(rollouts["evidence_sha256"][2:]))
    evidence.chmod(0o644)
    evidence.write_bytes(evidence.read_bytes() + b"tampered\n")
    audited = run(cli_env, "audit", "--artifacts")
    assert audited.returncode == 1
    assert "artifact" in audited.stdout and "evidence_sha256" in audited.stdout and "corrupt" in audited.stdout


def test_training_refuses_bad_requests_before_spending_compute(cli_env: dict[str, str], store: EventStore) -> None:
    run(cli_env, "experiment", "create", "t", "--domain", "math")
    run(cli_env, "experiment", "create", "bare")  # names no domain
    for args, message in [
        (["train", "nope/main"], "no branch"),
        (["train", "bare/main"], "names no domain: pass --domain"),
        (["evaluate", "bare/main"], "names no domain: pass --domain"),
        (["train", "t/main", "--domain", "bogus"], "unknown domain"),
        (["train", "t/main", "--steps", "0"], "max_steps"),
        (["train", "t/main", "--group-size", "1"], "num_generations"),
        (["evaluate", "t/main", "--k", "0"], "sample at least 1"),
    ]:
        result = run(cli_env, *args)
        assert result.returncode == 2 and message in result.stderr, (args, result.stderr)
        assert result.stderr.count("\n") == 1
    assert [e.type for e in store.read_branch(BranchRef("bare", "main"))] == ["ExperimentCreated"]


def requested(store: EventStore, ref: str) -> list[dict[str, Any]]:
    """The inputs of the tasks requested on a branch, oldest first."""
    branch = BranchRef.parse(ref)
    return [{"kind": e.payload["kind"], **e.payload["inputs"]} for e in store.read_branch(branch)
            if e.type == "TaskRequested" and e.branch == branch.branch]


def test_a_code_experiment_is_trained_and_evaluated_on_code_by_default(
    cli_env: dict[str, str], store: EventStore
) -> None:
    # With a broker configured the CLI only requests the task: what it asks for is the point here.
    env = {**cli_env, "EVOTRAINER_BROKER_URL": "redis://127.0.0.1:1/0"}
    assert run(env, "experiment", "create", "c", "--domain", "code").returncode == 0
    protocol = {"k": 2, "eval_tasks": 3, "temperature": 0.5, "seed": 7}
    assert run(env, "harness", "record", "c/main", "--spec", json.dumps({"evaluation": protocol})).returncode == 0
    assert run(env, "fork", "c/main", "b").returncode == 0
    for args in (["evaluate", "c/b"], ["train", "c/b"], ["evaluate", "c/b", "--domain", "math:digit_add", "--k", "5"]):
        result = run(env, *args)
        assert result.returncode == 0 and result.stdout.startswith(f"requested {args[0]} task"), result.stderr
    evaluation, training, overridden = requested(store, "c/b")
    assert evaluation["kind"] == "evaluate" and evaluation["domain"] == "code"
    assert {name: evaluation[name] for name in protocol} == protocol  # the harness's evaluation protocol
    assert training["kind"] == "train" and training["domain"] == "code"
    assert overridden["domain"] == "math:digit_add" and overridden["k"] == 5  # options still win
    assert {name: overridden[name] for name in ("eval_tasks", "temperature", "seed")} == {
        "eval_tasks": 3, "temperature": 0.5, "seed": 7}

    # `evotrainer run` records the full domain spec in the experiment's config: that wins.
    assert run(env, "experiment", "create", "d", "--domain", "math", "--config", '{"domain": "math:digit_add"}'
               ).returncode == 0
    assert run(env, "evaluate", "d/main").returncode == 0
    (default,) = requested(store, "d/main")
    assert default["domain"] == "math:digit_add" and (default["k"], default["eval_tasks"]) == (8, 32)


def test_status_shows_the_running_tasks_progress_from_another_process(
    cli_env: dict[str, str], database_url: str
) -> None:
    env = {**cli_env, "EVOTRAINER_HEARTBEAT_SECONDS": "0.2"}
    assert run(env, "experiment", "create", "live", "--domain", "math", "--config", '{"domain": "math:digit_add"}'
               ).returncode == 0
    training = subprocess.Popen([EVOTRAINER, "train", "live/main", "--steps", "40", "--group-size", "4"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    seen: list[str] = []
    try:
        with EventStore.connect(database_url, actor="test") as store:
            deadline = time.monotonic() + 600
            while not seen and training.poll() is None and time.monotonic() < deadline:
                seen = [line for line in experiment_status(store, "live").running if "train step" in line]
                time.sleep(0.1)
    finally:
        _, err = training.communicate(timeout=600)
    assert training.returncode == 0, err
    assert seen and re.fullmatch(r"train on live/main \(\S+\): train step \d+/40 reward \S+ .*", seen[0]), seen
    with EventStore.connect(database_url, actor="test") as store:
        assert experiment_status(store, "live").running == []  # finished: nothing shown as running
