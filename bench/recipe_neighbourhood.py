"""Is a fixed recipe locally optimal? Every training change the rule proposer can make,
trained for the same steps from the same point, against the recipe unchanged, paired by seed.

    .venv/bin/python bench/recipe_neighbourhood.py examples/math-tiny.toml --seeds 3 --chunks 3
    .venv/bin/python bench/recipe_neighbourhood.py examples/math-tiny.toml --seeds 1 --chunks 1 --steps 2 \
        --only grpo.temperature

A loop that must pay for its rejected candidates can only get ahead of a fixed recipe at
equal GRPO steps by finding a change that learns more per step than the recipe does. This
measures whether such a change exists among the ones the loop can propose: it trains the
recipe's first chunk once (what every loop seed promotes first), then, for each seed and
each change (the recipe itself included), `--chunks` further chunks of `grpo.max_steps`
under that change, and scores the result with the recipe's evaluation protocol on the
held-out test half. Prints each change's score per seed and its mean gain over the
unchanged recipe with a paired bootstrap interval (seeds, then problems; bootstrap.py).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CONDITIONS = ("insufficient_signal", "exploration_collapse", "echo_trap")
"""The conditions whose suggestions change how a run learns (reward hacking and laziness
only take back or add shaped rewards, which a recipe on correctness alone does not have)."""

SKIPPED_FIELDS = ("evaluation.", "grpo.max_steps")
"""Not a change to how a step learns: how the result is measured, or how many steps a
chunk holds (equal steps on every side is the point)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiment", help="an experiment file; its starting harness is the recipe")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--chunks", type=int, default=3, help="chunks trained after the first, per change")
    parser.add_argument("--steps", type=int, default=None, help="steps per chunk (default: the recipe's max_steps)")
    parser.add_argument("--only", action="append", default=[], help="measure only changes to this field (repeatable)")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.chunks < 1 or (args.steps is not None and args.steps < 1):
        print("recipe_neighbourhood: --seeds, --chunks and --steps must be at least 1", file=sys.stderr)
        return 2

    from evotrainer.artifacts import open_store
    from evotrainer.domains import get_domain
    from evotrainer.errors import UsageError
    from evotrainer.evolve.bootstrap import bootstrap_interval
    from evotrainer.evolve.experiment_config import ExperimentConfig
    from evotrainer.evolve.promotion import per_problem
    from evotrainer.evolve.proposer import builtin_proposals
    from evotrainer.evolve.skills import NO_CONDITION
    from evotrainer.training import EvaluationRequest, TrainingRequest, resolve_policy, train_grpo
    from evotrainer.training.evaluation import evaluate

    try:
        config = ExperimentConfig.load(args.experiment)
    except UsageError as exc:
        print(f"recipe_neighbourhood: {exc}", file=sys.stderr)
        return 2
    recipe = config.starting_harness()
    if args.steps is not None:
        recipe = recipe.with_field("grpo.max_steps", args.steps)
    store, domain = open_store(), get_domain(config.domain)
    proposals = builtin_proposals(recipe, [*CONDITIONS, NO_CONDITION], config.domain, domain.proposable_components)
    changes = [(p.field, p.value) for p in proposals if not p.field.startswith(SKIPPED_FIELDS)]
    if args.only:
        changes = [c for c in changes if c[0] in args.only]
    sides = [("recipe", recipe), *((f"{f} = {v}", recipe.with_field(f, v)) for f, v in changes)]
    ev = recipe.evaluation
    steps, seed0 = recipe.grpo.max_steps, recipe.grpo.seed

    def train(policy: str, spec, seed: int) -> str:  # noqa: ANN001 (a HarnessSpec)
        request = TrainingRequest(domain=config.domain, policy=policy, settings=spec.to_grpo_settings(seed=seed),
                                  train_tasks=config.train_tasks)  # fmt: skip
        return train_grpo(request, store, domain=domain).policy.sha256

    def scores(policy: str) -> dict[str, float]:
        request = EvaluationRequest(domain=config.domain, policy=policy, k=ev.k, eval_tasks=ev.eval_tasks,
                                    temperature=ev.temperature, max_completion_length=ev.max_completion_length,
                                    seed=ev.seed, part="test", batch_size=256)  # fmt: skip
        return per_problem(store.get(evaluate(request, store, domain=domain).results_sha256))

    began = time.perf_counter()
    start = resolve_policy(config.policy, store, domain=domain, domain_spec=config.domain).sha256
    first = train(start, recipe, seed0)
    first_scores = scores(first)
    print(f"{config.name}: the recipe's first chunk ({steps} steps) scores {_mean(first_scores):.3f} on the test half; "
          f"then {args.chunks} chunks of {steps} steps per change, {args.seeds} seeds, Avg@{ev.k} on "
          f"{len(first_scores)} test problems", flush=True)  # fmt: skip
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _ in sides}
    for s in range(args.seeds):
        for name, spec in sides:
            policy = first
            for chunk in range(args.chunks):
                # The same data orders on every side of a seed: the pairing is by seed.
                policy = train(policy, spec, seed0 + 1000 * (s + 1) + steps * (chunk + 1))
            results[name].append(scores(policy))
            print(f"  seed {s}  {name:<45} {_mean(results[name][-1]):.3f}  ({time.perf_counter() - began:.0f} s)",
                  flush=True)  # fmt: skip
    gate = recipe.promotion
    print(f"\n{'change':<45} {'score':>6} {'gain':>7}  interval ({gate.confidence:.0%}, seeds and problems)")
    for name, _ in sides:
        mean = sum(_mean(r) for r in results[name]) / args.seeds
        if name == "recipe":
            print(f"{name:<45} {mean:6.3f}")
            continue
        paired = zip(results[name], results["recipe"], strict=True)
        gains = [[ours[t] - theirs[t] for t in theirs] for ours, theirs in paired]
        low, high = bootstrap_interval(gains, gate.confidence, gate.bootstrap_samples)
        gain = sum(sum(g) for g in gains) / sum(len(g) for g in gains)
        print(f"{name:<45} {mean:6.3f} {gain:+7.3f}  [{low:+.3f}, {high:+.3f}]")
    return 0


def _mean(scores: dict[str, float]) -> float:
    return sum(scores.values()) / len(scores)


if __name__ == "__main__":
    raise SystemExit(main())
