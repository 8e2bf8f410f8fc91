"""bench/recipe_neighbourhood.py, the measurement behind the README's account of why the
loop does not beat math-tiny's recipe: a short run through the same code."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.training.conftest import DOMAIN, bench_script

pytestmark = pytest.mark.slow

EXPERIMENT = f"""
name = "neighbourhood"
domain = "{DOMAIN}"
policy = "tiny"
train_tasks = 32

[harness.grpo]
learning_rate = 1e-4
max_steps = 1

[harness.evaluation]
k = 2
eval_tasks = 6
"""


def test_trains_each_change_from_the_recipes_first_chunk_and_pairs_the_gains(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("EVOTRAINER_ARTIFACTS", str(tmp_path / "artifacts"))
    experiment = tmp_path / "neighbourhood.toml"
    experiment.write_text(EXPERIMENT)
    argv = [str(experiment), "--seeds", "2", "--chunks", "1", "--only", "grpo.temperature", "--only", "grpo.beta"]
    assert bench_script("recipe_neighbourhood").main(argv) == 0
    out = capsys.readouterr().out
    assert "the recipe's first chunk (1 steps)" in out
    per_seed = [line.split()[2] for line in out.splitlines() if line.startswith("  seed ")]
    assert per_seed == ["recipe", "grpo.temperature", "grpo.beta"] * 2
    table = out.split("interval (95%, seeds and problems)\n", 1)[1].splitlines()
    assert [row.split()[0] for row in table] == ["recipe", "grpo.temperature", "grpo.beta"]
    for row in table[1:]:
        gain, low, high = row.split()[-3:]
        assert float(low.strip("[,")) <= float(gain) <= float(high.strip("]"))


def test_refuses_what_it_cannot_measure(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert bench_script("recipe_neighbourhood").main([str(tmp_path / "none.toml")]) == 2
    assert capsys.readouterr().err.startswith("recipe_neighbourhood: ")
    assert bench_script("recipe_neighbourhood").main([str(tmp_path / "none.toml"), "--chunks", "0"]) == 2
