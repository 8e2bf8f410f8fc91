"""Benchmark: evotrainer's GRPO training task against a bare TRL GRPOTrainer, same config.

Both runs train the same tiny checkpoint on the same math:digit_add tasks with the same
GRPOConfig (built by the same function) and the same seed, so they sample the same
completions and do the same optimisation work. The bare run loads the model, trains and
saves it; evotrainer's also verifies the checkpoint, scores every completion into the
evidence, and stores checkpoint and evidence as artifacts. Runs alternate and the median
of each is compared. Target: ratio <= 1.10.

    .venv/bin/python bench/train.py [--steps 30] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

DOMAIN = "math:digit_add"


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
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
        bare, ours = [], []
        for i in range(opts.repeats):
            # Alternate the order so warm caches and CPU frequency favour neither side.
            if i % 2 == 0:
                bare.append(bare_trl(store, base.sha256, settings, tasks, domain))
                ours.append(evotrainer_run(store, request, domain))
            else:
                ours.append(evotrainer_run(store, request, domain))
                bare.append(bare_trl(store, base.sha256, settings, tasks, domain))
    b, o = statistics.median(bare), statistics.median(ours)
    per_step = settings.prompts_per_step * settings.num_generations
    print(f"steps={opts.steps} repeats={opts.repeats} completions/step={per_step}")
    print(f"bare TRL GRPOTrainer: median {b:.2f}s  runs {[round(x, 2) for x in bare]}")
    print(f"evotrainer train_grpo: median {o:.2f}s  runs {[round(x, 2) for x in ours]}")
    print(f"overhead ratio: {o / b:.3f}x (target <= 1.10x)")


if __name__ == "__main__":
    main()
