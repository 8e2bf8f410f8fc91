"""The evolve controller on the real store with real (tiny) training: the loop's events,
resumption from the log after a crash at any step, and its budget."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from evotrainer.errors import UsageError
from evotrainer.evolve import fork_for_intervention
from evotrainer.evolve.controller import _Run, run_experiment
from evotrainer.evolve.experiment_config import ExperimentConfig
from evotrainer.evolve.proposer import MAX_EVALUATION_SAMPLES
from evotrainer.evolve.status import experiment_status
from evotrainer.evolve.tasks import _current_generation, task_id
from evotrainer.fleet import request_task
from evotrainer.harness import HarnessSpec
from evotrainer.harness.versions import versioned_event
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, NewEvent
from tests.evolve.builders import propose
from tests.test_cli import run

TINY = {"grpo": {"max_steps": 2, "num_generations": 4, "prompts_per_step": 2},
        "evaluation": {"k": 2, "eval_tasks": 4}}  # fmt: skip


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
    # The untrained start was evaluated on main before anything trained (doing nothing is
    # the first incumbent), main trained nothing, and each candidate trained and was
    # diagnosed once; each newest policy has an evaluation. The first candidate continues
    # the start under the same harness; the second tests an intervention (a skill outcome).
    assert (types["TrainingCompleted"], types["DiagnosisRecorded"]) == (2, 2)
    main_events = store.read_branch(BranchRef("loop", "main"))
    assert [e.type for e in main_events[:2]] == ["ExperimentCreated", "HarnessVersioned"]
    assert any(e.type == "EvaluationRecorded" and e.payload["request"]["policy"] == "tiny" for e in main_events)
    assert not any(e.type == "TrainingCompleted" for e in main_events)
    for info in store.branches("loop"):
        history = store.read_branch(info.ref)
        newest = next(e.payload["policy_sha256"] for e in reversed(history) if e.type == "PolicyCheckpointed")
        assert any(e.type == "EvaluationRecorded" and e.payload["policy_sha256"] == newest for e in history)
    assert (types["PromotionDecided"], types["SkillRecorded"], types["BranchForked"]) == (2, 1, 2)
    assert types["InterventionProposed"] >= 1 and types["TaskFailed"] == 0
    decisions = [e for e in store.read_branch(BranchRef("loop", "main")) if e.type == "PromotionDecided"]
    assert decisions[0].payload["candidate"] == str(candidate)  # the half-done one was finished first
    assert candidate.branch.startswith("continue-") and decisions[0].payload["intervention_id"] is None
    assert decisions[1].payload["intervention_id"]
    assert all(d.payload["evidence"]["protocol"]["part"] == "selection" for d in decisions)
    assert all(d.payload["evidence"]["per_problem"]["interval"] is not None for d in decisions)

    before = store.head(BranchRef("loop", "main"))
    again = run_experiment(store, config(2), lines.append)  # budget spent: nothing new
    assert store.head(BranchRef("loop", "main")) == before and again.candidates == 2
    assert run_experiment(store, config(3), lines.append).candidates == 3  # a bigger budget goes on

    # An experiment may start from a stored checkpoint (a sha256): main records it as its
    # starting policy, so the gate has a checkpoint to compare the first candidate with.
    trained = next(e.payload["policy_sha256"] for e in reversed(store.read_branch(candidate))
                   if e.type == "PolicyCheckpointed")  # fmt: skip
    from_sha = ExperimentConfig(name="loop-from-sha", policy=trained, iterations=1, harness=TINY)
    assert run_experiment(store, from_sha, lines.append).candidates == 1
    start = store.read_branch(BranchRef("loop-from-sha", "main"))
    assert [e.payload["policy_sha256"] for e in start if e.type == "PolicyCheckpointed"] == [trained]
    assert len([e for e in start if e.type == "PromotionDecided"]) == 1
    missing = from_sha.model_copy(update={"name": "loop-missing", "policy": "0" * 64})
    with pytest.raises(UsageError, match="is not in the artifact store"):
        run_experiment(store, missing, lines.append)
    assert not [b for b in store.branches() if b.ref.experiment == "loop-missing"]


def test_the_step_budget_counts_every_candidate_and_stops_the_loop(store: EventStore) -> None:
    lines: list[str] = []
    budgeted = config(10).model_copy(update={"budget_steps": 5})
    summary = run_experiment(store, budgeted, lines.append)
    # Two candidates of 2 steps fit in 5; a third would overrun the budget. (The second
    # look at an inconclusive one trains nothing, so it costs no step.)
    assert summary.steps_spent == 4
    assert lines[-1] == "budget spent: 4 of 5 GRPO steps used, a candidate needs 2"
    # The untrained start answers what its rejected continuation's run was diagnosed with.
    assert any(line.startswith("loop/main: proposed") and line.endswith("for insufficient_signal)") for line in lines)
    status = experiment_status(store, "loop")
    assert (status.budget_steps, status.spent, status.left, status.running) == (5, 4, 1, [])
    trained = [b for b in status.branches[1:] if b.steps]
    assert status.branches[0].branch == "main" and [b.steps for b in trained] == [2, 2]
    assert all(b.branch.startswith("second-look-") for b in status.branches[1:] if not b.steps)
    assert summary.candidates == len(status.branches) - 1
    assert {b.verdict for b in status.branches[1:]} <= {"promoted", "rejected"}
    assert status.branches[0].verdict == "start" and status.branches[0].score is not None
    # What each candidate's runs cost: tokens generated and trained on, CPU time (no GPU here).
    assert status.branches[0].tokens == 0
    assert all(b.tokens > 0 and b.cpu_seconds > 0 and b.gpu_seconds == 0 for b in trained)


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
    ("name = 'x'\niterations = true\n", "iterations: Input should be a valid integer"),
    ("name = 'x'\n[harness.grpo]\nmax_completion_length = 1\n[harness.filters]\nmask_truncated_completions = true\n",
     "mask_truncated_completions"),
    ("name = 'x'\n[proposer]\nkind = 'oracle'\n", "proposer.kind: Input should be 'rules', 'llm', 'human' or 'agent'"),
    ("name = 'x'\n[proposer]\nautonomy = 'escalate-after-0'\n", "escalate-after-N (N a positive whole number)"),
    ("name = 'x'\n[proposer]\nkind = 'llm'\n", "an llm proposer needs base_url and model"),
    ("name = 'x'\n[proposer]\nkind = 'human'\nfallback = ['rules', 'rules']\n", "repeats a kind"),
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


def test_a_candidate_whose_run_fails_is_rejected_with_the_failure_and_the_loop_goes_on(store: EventStore) -> None:
    cfg = config(1)
    store.create_experiment("loop")
    main = BranchRef("loop", "main")
    store.append(main, [versioned_event(cfg.starting_harness())])
    iid = propose(store, main, "grpo.learning_rate", 2e-3)
    fork_for_intervention(store, main, "broken", iid)
    broken = BranchRef("loop", "broken")
    # Its run starts from a checkpoint no artifact store holds: the train task fails.
    store.append(broken, [NewEvent("PolicyCheckpointed", {"policy_sha256": "0" * 64, "kind": "trained",
                                                          "parameters": 1, "size_bytes": 1})])  # fmt: skip
    lines: list[str] = []
    summary = run_experiment(store, cfg, lines.append)
    assert summary.candidates == 1 and summary.promoted == 0
    decided, skill = [e for e in store.read_branch(main) if e.type in ("PromotionDecided", "SkillRecorded")]
    assert decided.payload["decision"] == "rejected" and "train task" in decided.payload["reason"]
    assert "failed" in decided.payload["evidence"]["failure"]
    assert (skill.payload["failures"], skill.payload.get("effect_size")) == (1, None)
    assert "its run failed" in skill.payload["validation"]


def test_work_whose_attempts_ran_out_is_asked_for_again_under_a_new_id(store: EventStore) -> None:
    store.create_experiment("loop")
    main = BranchRef("loop", "main")
    inputs = {"evidence": "e" * 64}
    first = task_id("diagnose", main, inputs)
    assert _current_generation(store, main, first) == first
    for ident, error in ((first, "AttemptsExhausted"), (f"{first}-r2", "TypeError")):
        request_task(store, main, "diagnose", ident, inputs)
        store.append(main, [NewEvent("TaskFailed", {"task_id": ident, "worker": "w:1", "attempt": 3,
                                                    "error_class": error, "message": "m"})])  # fmt: skip
    # -r2 failed by raising: the same inputs would fail the same way, so it stays.
    assert _current_generation(store, main, first) == f"{first}-r2"


def test_a_second_look_judges_the_rejected_policy_again_with_more_samples_and_trains_nothing(
    store: EventStore,
) -> None:
    # A gate no chunk can clear: the first candidate is rejected whatever it gained. Twelve
    # problems a half is more than half of digit_add's held-out sums: only k can double.
    strict = {**TINY, "evaluation": {"k": 2, "eval_tasks": 12}, "promotion": {"min_margin": 1.0}}
    first = ExperimentConfig(name="loop", iterations=1, harness=strict)
    run_experiment(store, first)
    (rejected,) = [info.ref for info in store.branches("loop") if info.name != "main"]
    trained = [e for e in store.read_branch(rejected) if e.branch == rejected.branch and e.type == "TrainingCompleted"]

    lines: list[str] = []
    loop = _Run(store, first.model_copy(update={"iterations": 2}), lines.append)
    main = BranchRef("loop", "main")
    look = loop._second_look(main, {info.name for info in store.branches("loop")}, loop._decisions())
    assert look is not None and look.branch.startswith("second-look-")
    assert "trains nothing" in lines[-1]
    loop.judge(look)

    history = store.read_branch(look)
    own = [e for e in history if e.branch == look.branch]
    assert not [e for e in own if e.type in ("TrainingCompleted", "RolloutsRecorded")]
    assert loop.steps_spent(loop.candidates()) == sum(int(e.payload["steps"]) for e in trained)
    (evaluation,) = [e for e in own if e.type == "EvaluationRecorded"]
    assert (evaluation.payload["request"]["k"], evaluation.payload["request"]["eval_tasks"]) == (4, 12)
    decision = [e for e in store.read_branch(main) if e.type == "PromotionDecided"][-1].payload
    assert decision["candidate"] == str(look)
    # Judged on the rejected branch's own run and diagnosis, against the start re-measured
    # the same way.
    diagnosis = [e for e in store.read_branch(rejected) if e.type == "DiagnosisRecorded"][-1]
    assert decision["evidence"]["diagnosis"]["event_id"] == diagnosis.event_id
    assert decision["evidence"]["protocol"]["k"] == 4
    assert decision["evidence"]["baseline_evaluation"]["branch"] == "loop/main"
    # One second look per policy: the look itself is never looked at again.
    assert loop._second_look(main, {info.name for info in store.branches("loop")}, loop._decisions()) is None


def test_a_second_look_doubles_the_problems_where_the_held_out_split_holds_them(store: EventStore) -> None:
    # Problems differ more than samples of one problem: more problems narrow the interval
    # most, and column_add3's held-out split holds thousands; digit_add's holds about 20.
    many = _Run(store, ExperimentConfig(name="many", domain="math:column_add3", harness=TINY), lambda line: None)
    few = _Run(store, ExperimentConfig(name="few", domain="math:digit_add", harness=TINY), lambda line: None)
    spec = HarnessSpec.model_validate({"evaluation": {"k": 8, "eval_tasks": 150}})
    assert many._more_power(spec) == ("evaluation.eval_tasks", 300)
    assert few._more_power(spec) == ("evaluation.k", 16)
    limits = HarnessSpec.model_validate({"evaluation": {"k": MAX_EVALUATION_SAMPLES, "eval_tasks": 150}})
    assert few._more_power(limits) is None


@pytest.mark.slow
def test_a_run_whose_database_connections_are_cut_reconnects_and_finishes(
    cli_env: dict[str, str], tmp_path: Path, store: EventStore
) -> None:
    """pg_terminate_backend of every connection of `evotrainer run` in the middle of the
    loop: it says so in one line, connects again and resumes from the log (no traceback,
    nothing recorded twice)."""
    import subprocess
    import threading
    import time

    import psycopg

    from tests.test_cli import EVOTRAINER

    path = tmp_path / "loop.toml"
    path.write_text('name = "cut"\ndomain = "math:digit_add"\npolicy = "tiny"\niterations = 1\n'
                    '[harness.grpo]\nmax_steps = 2\nnum_generations = 4\nprompts_per_step = 2\n'
                    '[harness.evaluation]\nk = 2\neval_tasks = 4\n')  # fmt: skip
    url = cli_env["EVOTRAINER_DATABASE_URL"]
    cut: list[int] = []
    ours = store.conn.info.backend_pid  # the test's own connection stays

    def cut_when_main_is_evaluated() -> None:
        with psycopg.connect(url, autocommit=True) as watcher:
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline and not cut:
                done = watcher.execute("SELECT count(*) FROM events WHERE type = 'EvaluationRecorded'").fetchone()
                if done and done[0]:
                    cut.append(watcher.execute(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                        " WHERE datname = current_database() AND pid NOT IN (pg_backend_pid(), %s)",
                        (ours,)).fetchone()[0])  # fmt: skip
                time.sleep(0.2)

    watcher = threading.Thread(target=cut_when_main_is_evaluated)
    watcher.start()
    done = subprocess.run([EVOTRAINER, "run", str(path)], env=cli_env, capture_output=True, text=True, timeout=600,
                          check=False)  # fmt: skip
    watcher.join()
    assert cut and cut[0] >= 1, "the connections were never cut"
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert "lost the database connection (" in done.stdout and ": resuming from the log in 1 s" in done.stdout
    assert done.stdout.splitlines()[-1].startswith("best so far: cut/")
    keys = [e.idempotency_key for info in store.branches("cut") for e in store.read_branch(info.ref)
            if e.branch == info.name and e.idempotency_key]  # fmt: skip
    assert len(keys) == len(set(keys))
    assert run(cli_env, "audit").returncode == 0
