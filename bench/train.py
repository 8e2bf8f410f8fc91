"""Benchmark: evotrainer's GRPO training task against a bare TRL GRPOTrainer, same config.

Both runs train the same tiny checkpoint on the same math:digit_add tasks with the same
GRPOConfig (built by the same function) and the same seed, so they sample the same
completions and do the same optimisation work. The bare run loads the model, trains and
saves it; evotrainer's also verifies the checkpoint, scores every completion into the
evidence, and stores checkpoint and evidence as artifacts.

    .venv/bin/python bench/train.py [--steps 30] [--rounds 7]

Every round runs each side once, back to back, in an order that rotates from round to
round (bench/common.py), and takes the ratio evotrainer / bare of the two wall times
within the round. A run of 30 steps takes a few seconds on two cores, so one round is
short and noisy: seven rounds still finish within two minutes or so. Prints the
median round's ratio with the lowest and highest, the machine's load over the run, and
whether the median meets the target (<= 1.10x). One step of each side runs first,
untimed, so neither side's first round pays for the process's first training step.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.common import LoadWatch, paired_rounds, ratios, report_ratio, spread  # noqa: E402

DOMAIN = "math:digit_add"
TARGET = 1.10


def bare_trl(store, base_sha: str, settings, tasks, domain) -> float:  # type: ignore[no-untyped-def]
    """What a user would write with TRL alone: load, train with per-component rewards, save."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOTrainer

    from evotrainer.training.environment import deterministic
    from evotrainer.training.grpo_trainer import build_grpo_config

    start = time.perf_counter()
    deterministic(settings.seed, settings.threads)
    path = store.checkout(base_sha)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype="float32")
    by_id = {t.task_id: t for t in tasks}
    components = [c for c in domain.reward_components if settings.weight(c) != 0]

    def make(component: str):  # type: ignore[no-untyped-def]
        def reward(completions, task_id, **_):  # type: ignore[no-untyped-def]
            return [domain.score(by_id[t], c)[component] for t, c in zip(task_id, completions, strict=True)]

        reward.__name__ = component
        return reward

    dataset = Dataset.from_list([{"prompt": t.prompt, "task_id": t.task_id} for t in tasks])
    with tempfile.TemporaryDirectory() as out:
        args = build_grpo_config(
            settings, out, progress_bar=False, reward_weights=[settings.weight(c) for c in components]
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[make(c) for c in components],
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
        )
        trainer.remove_callback(PrinterCallback)
        trainer.train()
        trainer.save_model(str(Path(out) / "final"))
    return time.perf_counter() - start


def evotrainer_run(store, request, domain) -> float:  # type: ignore[no-untyped-def]
    from evotrainer.training import train_grpo

    start = time.perf_counter()
    train_grpo(request, store, domain=domain)
    return time.perf_counter() - start


def sides(store, base_sha: str, request, tasks, domain) -> dict[str, Callable[[], float]]:  # type: ignore[no-untyped-def]
    """The two sides of a round, each training `request`'s settings from the same base."""
    return {
        "bare TRL GRPOTrainer": lambda: bare_trl(store, base_sha, request.settings, tasks, domain),
        "evotrainer train_grpo": lambda: evotrainer_run(store, request, domain),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="GRPO steps per run")
    parser.add_argument("--rounds", type=int, default=7, help="paired rounds; the median round counts")
    opts = parser.parse_args()

    import logging

    from evotrainer.artifacts import open_store
    from evotrainer.domains import get_domain
    from evotrainer.training import GRPOSettings, TrainingRequest, resolve_policy
    from evotrainer.training.grpo_trainer import training_tasks
    from evotrainer.training.policies import load_policy

    logging.disable(logging.INFO)
    domain = get_domain(DOMAIN)
    settings = GRPOSettings(
        reward_weights={"correctness": 1.0, "format": 0.2},
        max_steps=opts.steps,
        prompts_per_step=4,
        num_generations=8,
        max_completion_length=4,
        learning_rate=2e-4,
    )
    request = TrainingRequest(domain=DOMAIN, policy="tiny", settings=settings, train_tasks=64)
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(tmp)
        base = resolve_policy("tiny", store, domain=domain, domain_spec=DOMAIN)  # warm start outside the timing
        _, tokenizer = load_policy(base.sha256, store)
        tasks = training_tasks(domain, request, tokenizer)
        one_step = dataclasses.replace(request, settings=dataclasses.replace(settings, max_steps=1))
        for warm_up in sides(store, base.sha256, one_step, tasks, domain).values():
            warm_up()
        with LoadWatch() as load:
            found = paired_rounds(sides(store, base.sha256, request, tasks, domain), opts.rounds)
    per_step = settings.prompts_per_step * settings.num_generations
    print(f"{opts.rounds} paired rounds, sides in rotating order; {opts.steps} steps a run, {per_step} completions"
          " a step; seconds, median (lowest-highest):")
    for name, times in found.items():
        print(f"  {name:24s} {spread(times)}   runs {[round(t, 2) for t in times]}")
    report_ratio("evotrainer / bare TRL (wall time of a run)",
                 ratios(found["evotrainer train_grpo"], found["bare TRL GRPOTrainer"]), TARGET, at_least=False,
                 unit="x")  # fmt: skip
    print(load.line())


if __name__ == "__main__":
    main()
