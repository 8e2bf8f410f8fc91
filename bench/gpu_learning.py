"""Does a policy learn under a recipe? Score the start, train one run per learning rate,
score each result: Avg@k on the held-out test half, everything else the recipe's.

    python bench/gpu_learning.py --policy smollm2 --domain math:column_add --steps 80 --lr 1e-6 --lr 1e-5
    python bench/gpu_learning.py --allow-cpu --policy tiny --domain math:digit_add --steps 2 --lr 1e-4

The defaults are examples/math-smollm2.toml's fixed recipe (num_generations 8, 4 prompts a
step, 32 completion tokens, clip-higher 0.2/0.28, no KL, T=1.0; Avg@8 on 100 test
problems). Meant for a GPU, where SmolLM2 takes seconds a step (minutes on 2 CPU cores);
like bench/gpu_check.py it refuses to run on a CPU unless `--allow-cpu`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.gpu_check import prepare_device  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="smollm2")
    parser.add_argument("--domain", default="math:column_add")
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--lr", type=float, action="append", help="learning rate (repeatable; default 1e-6)")
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--problems", type=int, default=100)
    parser.add_argument("--max-completion", type=int, default=32)
    parser.add_argument("--allow-cpu", action="store_true")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.k < 1 or args.problems < 1:
        print("gpu_learning: --steps, --k and --problems must be at least 1", file=sys.stderr)
        return 2

    device = prepare_device("gpu_learning", args.allow_cpu)
    if device is None:
        return 2
    from evotrainer.artifacts import open_store
    from evotrainer.domains import get_domain
    from evotrainer.training import EvaluationRequest, GRPOSettings, TrainingRequest, resolve_policy, train_grpo
    from evotrainer.training.evaluation import evaluate

    store, domain = open_store(), get_domain(args.domain)
    start = resolve_policy(args.policy, store, domain=domain, domain_spec=args.domain).sha256

    def score(policy: str) -> float:
        request = EvaluationRequest(domain=args.domain, policy=policy, k=args.k, eval_tasks=args.problems,
                                    max_completion_length=args.max_completion, part="test", batch_size=256)  # fmt: skip
        return evaluate(request, store, domain=domain).avg_at_k

    print(f"{args.policy} on {args.domain}, {device}: avg@{args.k} on {args.problems} test problems")
    print(f"  start: {score(start):.3f}", flush=True)
    for lr in args.lr or [1e-6]:
        settings = GRPOSettings(learning_rate=lr, max_steps=args.steps, num_generations=8, prompts_per_step=4,
                                max_completion_length=args.max_completion, temperature=1.0, beta=0.0,
                                epsilon=0.2, epsilon_high=0.28)  # fmt: skip
        began = time.perf_counter()
        result = train_grpo(TrainingRequest(domain=args.domain, policy=start, settings=settings, train_tasks=512),
                            store, domain=domain)  # fmt: skip
        seconds = time.perf_counter() - began
        summary = result.evidence_summary
        print(f"  lr {lr:g}, {args.steps} steps in {seconds:.0f}s (mean reward {summary['mean_reward']:.3f}, "
              f"dead groups {summary['dead_group_ratio']:.0%}): {score(result.policy.sha256):.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
