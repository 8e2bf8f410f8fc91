"""The evolve controller on the real store with real (tiny) training: the loop's events,
resumption from the log after a crash at any step, and its budget."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from evotrainer.errors import UsageError
from evotrainer.evolve.controller import run_experiment
from evotrainer.evolve.experiment_config import ExperimentConfig
from evotrainer.harness import HarnessSpec
from evotrainer.harness.versions import versioned_event
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore
from tests.test_cli import run

TINY = {"grpo": {"max_steps": 2, "num_generations": 4, "prompts_per_step": 2},
        "evaluation": {"k": 2, "eval_tasks": 4}}  # fmt: skip


@pytest.fixture(autouse=True)
def _artifacts_here(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EVOTRAINER_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("EVOTRAINER_ARTIFACTS", raising=False)
    monkeypatch.delenv("EVOTRAINER_BROKER_URL", raising=False)


def config(iterations: int) -> ExperimentConfig:
    return ExperimentConfig(name="loop", iterations=iterations, harness=TINY)


def event_types(store: EventStore) -> Counter[str]:
    return Counter(e.type for info in store.branches("loop") for e in store.read_branch(info.ref)
                   if e.branch == info.name)  # fmt: skip


class Crash(Exception):
    """Stands for the controller being killed."""


@pytest.mark.slow
def test_the_loop_records_every_stage_and_resumes_without_repeating_anything(store: EventStore) -> None:
    lines: list[str] = []

    def crash_after_the_first_fork(line: str) -> None:
        lines.append(line)
        if " forked " in line:
            raise Crash  # killed between the fork and the candidate's training

    with pytest.raises(Crash):
        run_experiment(store, config(2), crash_after_the_first_fork)
    (candidate,) = [info.ref for info in store.branches("loop") if info.name != "main"]
    assert not [e for e in store.read_branch(candidate) if e.branch == candidate.branch and e.type == "TaskRequested"]

    summary = run_experiment(store, config(2), lines.append)
    assert summary.candidates == 2 and lines[-1] == "budget spent: 2 of 2 candidate versions tried"
    types = event_types(store)
    # main and two candidates each trained and diagnosed once, and each newest policy has
    # an evaluation (a run that left the policy as it was finds its parent's); one decision
    # and one skill outcome per candidate, whatever the crash interrupted.
    assert (types["TrainingCompleted"], types["DiagnosisRecorded"]) == (3, 3)
    for info in store.branches("loop"):
        history = store.read_branch(info.ref)
        newest = next(e.payload["policy_sha256"] for e in reversed(history) if e.type == "PolicyCheckpointed")
        assert any(e.type == "EvaluationRecorded" and e.payload["policy_sha256"] == newest for e in history)
    assert (types["PromotionDecided"], types["SkillRecorded"], types["BranchForked"]) == (2, 2, 2)
    assert types["InterventionProposed"] >= 2 and types["TaskFailed"] == 0
    decisions = [e for e in store.read_branch(BranchRef("loop", "main")) if e.type == "PromotionDecided"]
    assert decisions[0].payload["candidate"] == str(candidate)  # the half-done one was finished first
    assert all(d.payload["intervention_id"] and d.payload["evidence"]["protocol"]["k"] == 2 for d in decisions)

    before = store.head(BranchRef("loop", "main"))
    again = run_experiment(store, config(2), lines.append)  # budget spent: nothing new
    assert store.head(BranchRef("loop", "main")) == before and again.candidates == 2
    assert run_experiment(store, config(3), lines.append).candidates == 3  # a bigger budget goes on


def test_a_changed_starting_harness_is_refused_by_name(store: EventStore) -> None:
    store.create_experiment("loop")
    store.append(BranchRef("loop", "main"), [versioned_event(HarnessSpec())])
    with pytest.raises(UsageError, match="started under harness .* give the changed experiment a new name"):
        run_experiment(store, config(1))


@pytest.mark.parametrize("text, message", [
    ("name = 'x'\nbogus = 1\n", "bogus: Extra inputs are not permitted"),
    ("name = 'x'\niterations = 0\n", "iterations: Input should be greater than or equal to 1"),
    ("name = 'x'\n[harness.grpo]\nlearning_rate = 5\n", "invalid harness spec"),
    ("name = 'bad name'\n", "bad experiment name"),
    ("name = \n", "is not valid TOML"),
    ("name = 'x'\ndomain = 'chess'\n", "unknown domain"),
])  # fmt: skip
def test_a_bad_experiment_file_is_one_line_and_writes_nothing(
    cli_env: dict[str, str], tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "experiment.toml"
    path.write_text(text)
    result = run(cli_env, "run", str(path))
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert run(cli_env, "lineage").stdout.strip() in ("", "no experiments")
