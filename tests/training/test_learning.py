"""The fixed recipes learn: GRPO under an example's starting harness raises the held-out
score of its starting policy (training reward alone could rise by memorising the training
problems; the held-out selection half cannot be memorised)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evotrainer.evolve.controller import selection_protocol
from evotrainer.evolve.experiment_config import ExperimentConfig
from evotrainer.training import TrainingRequest, evaluate, train_grpo
from evotrainer.training.task import evaluation_request

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.slow
def test_the_math_tiny_recipe_raises_the_held_out_score(store) -> None:  # type: ignore[no-untyped-def]
    config = ExperimentConfig.load(EXAMPLES / "math-tiny.toml")
    spec = config.starting_harness()
    protocol = {**selection_protocol(config.domain, spec), "eval_tasks": 100}

    def held_out(policy: str) -> float:
        return evaluate(evaluation_request({**protocol, "policy": policy}), store).avg_at_k

    before = held_out(config.policy)
    assert 0.05 < before < 0.6  # neither 0 nor solved: room to climb, signal to climb with
    # One candidate's chunk of the recipe (the full budget is four of them).
    request = TrainingRequest(config.domain, config.policy, spec.to_grpo_settings(), train_tasks=config.train_tasks)
    trained = train_grpo(request, store)
    after = held_out(trained.policy.sha256)
    # The start is not the same on every machine (training/tiny_build.py), so neither is
    # the climb: 0.42 -> 0.73 on the Intel machine, 0.576 -> 0.722 on an AMD EPYC (12-05).
    # The bar was 0.15, set from the Intel machine alone; a recipe that does not learn
    # leaves the score where it was (the same policy scores the same), far below 0.1.
    assert after > before + 0.1, (before, after)
