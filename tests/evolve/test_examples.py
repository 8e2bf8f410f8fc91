"""Every example experiment file loads, validates and names a budget the loop can spend."""

from __future__ import annotations

from pathlib import Path

import pytest

from evotrainer.domains import get_domain
from evotrainer.evolve.experiment_config import ExperimentConfig

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.toml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_an_example_loads_and_trains_a_whole_number_of_chunks(path: Path) -> None:
    config = ExperimentConfig.load(path)
    get_domain(config.domain)
    spec = config.starting_harness()
    if config.budget_steps is not None:
        assert config.budget_steps % spec.grpo.max_steps == 0, "the budget should be whole candidate chunks"
    text = path.read_text()
    assert "fixed recipe" in text or path.name in ("digits.toml", "math-canary.toml"), "say why the recipe's values are what they are"
