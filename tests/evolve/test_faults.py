"""A rejection an earlier version recorded because a candidate's workers died (its work ran
out of attempts) is a fault, not a verdict: no skill outcome, and the loop judges the
candidate for real."""

from __future__ import annotations

import pytest

from evotrainer.evolve import fork_for_intervention
from evotrainer.evolve.controller import run_experiment
from evotrainer.evolve.experiment_config import ExperimentConfig
from evotrainer.evolve.promotion import gate_decisions, reject_unrunnable
from evotrainer.evolve.skills import skill_library
from evotrainer.harness.versions import versioned_event
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore
from tests.evolve.builders import propose

TINY = {"grpo": {"max_steps": 2, "num_generations": 4, "prompts_per_step": 2},
        "evaluation": {"k": 2, "eval_tasks": 4}}  # fmt: skip
LOST = ("train task train-0123456789abcdef on loop/lr failed: AttemptsExhausted: gave up after 3 of 3 allowed "
        "attempts: attempt 3 lost: its worker vm:4242 is no longer running")  # fmt: skip


@pytest.mark.slow
def test_a_rejection_recorded_for_dead_workers_is_no_verdict_and_no_skill_outcome(store: EventStore) -> None:
    cfg = ExperimentConfig(name="loop", iterations=1, harness=TINY)
    store.create_experiment("loop")
    main = BranchRef("loop", "main")
    store.append(main, [versioned_event(cfg.starting_harness())])
    fork_for_intervention(store, main, "lr", propose(store, main, "grpo.learning_rate", 2e-3))
    candidate = BranchRef("loop", "lr")
    reject_unrunnable(store, candidate, LOST)  # as the version before this one did
    assert [e.type for e in store.read_branch(main)][-2:] == ["PromotionDecided", "SkillRecorded"]
    assert skill_library(store).skills == {}  # its failure is not counted
    assert gate_decisions(store, "loop") == []

    summary = run_experiment(store, cfg)
    assert summary.candidates == 1
    (verdict,) = gate_decisions(store, "loop")
    assert verdict.payload["candidate"] == "loop/lr" and "failure" not in verdict.payload["evidence"]
    (skill,) = skill_library(store).skills.values()
    assert skill.successes + skill.failures == 1  # this verdict, once
    assert skill.effects == [verdict.payload["margin"]]
