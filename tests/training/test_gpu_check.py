"""bench/gpu_check.py is the only code that runs where CI never does (a GPU machine): its
CPU path runs here so that it cannot rot between the rare runs on a GPU."""

from __future__ import annotations

import pytest

from tests.training.conftest import DOMAIN, bench_script

pytestmark = pytest.mark.slow


def test_trains_and_scores_through_the_gpu_path_on_cpu(store, math_domain, capsys) -> None:  # type: ignore[no-untyped-def]
    report = bench_script("gpu_check").run_checks(["tiny"], 2, store, math_domain, DOMAIN, vllm=False)
    (entry,) = report
    (run,) = entry["runs"]
    assert run["rollouts"] == "transformers" and run["steps"] == 2
    assert run["generated_tokens"] > 0 and run["tokens_per_s"] > 0
    assert run["environment"]["device"] == "cpu"
    assert 0.0 <= entry["evaluation"]["avg_at_8"] <= 1.0
    out = capsys.readouterr().out
    assert "not measured (vllm is not installed here)" in out


def test_refuses_to_report_cpu_figures_as_gpu_ones(capsys) -> None:  # type: ignore[no-untyped-def]
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the refusal is for machines without one")
    assert bench_script("gpu_check").main(["--steps", "1"]) == 2
    assert "no CUDA device visible" in capsys.readouterr().err
    assert bench_script("gpu_check").main(["--steps", "0", "--allow-cpu"]) == 2


def test_the_learning_check_scores_the_start_and_each_step_size_on_cpu(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("EVOTRAINER_ARTIFACTS", str(tmp_path / "artifacts"))
    argv = ["--allow-cpu", "--policy", "tiny", "--domain", DOMAIN, "--steps", "1", "--lr", "1e-4", "--lr", "1e-3",
            "--k", "2", "--problems", "4", "--max-completion", "4"]  # fmt: skip
    assert bench_script("gpu_learning").main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"tiny on {DOMAIN}, cpu: avg@2 on 4 test problems" and lines[1].startswith("  start: ")
    assert [line.split(",")[0] for line in lines[2:]] == ["  lr 0.0001", "  lr 0.001"]
    assert all(0.0 <= float(line.rsplit(": ", 1)[1]) <= 1.0 for line in lines[1:])
    assert bench_script("gpu_learning").main(["--steps", "0", "--allow-cpu"]) == 2
