"""Determinism and the environment fingerprint recorded with every training result.

`deterministic(seed, threads)` seeds every generator and pins torch to deterministic
kernels and a fixed thread count: on CPU that makes equal requests give byte-identical
checkpoints and evidence. `fingerprint()` names what replay must match (package versions,
device, threads) so a divergence can be blamed on the environment rather than the code.
"""

from __future__ import annotations

import os
import platform
import random
from functools import cache
from importlib import metadata
from typing import Any

from evotrainer.offline import go_offline, hub_offline, switches

_PACKAGES = ("torch", "transformers", "trl", "accelerate", "tokenizers", "safetensors", "numpy", "vllm", "gguf")
_LIBRARIES = ("huggingface_hub", "datasets", "peft", "scipy", "math-verify", "sympy")
"""Other libraries a result can depend on: recorded, but not in the tiny policy's cache key."""


def offline() -> None:
    """Never reach for a model hub, and no telemetry: effective even when the hub was
    imported already (evotrainer.offline), which setting the variables alone is not."""
    go_offline()


def deterministic(seed: int, threads: int) -> None:
    """Seed python, numpy and torch; deterministic kernels; a fixed number of CPU threads."""
    import numpy as np
    import torch

    offline()
    # Required by cuBLAS for deterministic matmuls; harmless on CPU.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    # Reductions split across threads sum in a thread-count-dependent order, so the count
    # is part of the reproducibility contract and is recorded in the fingerprint.
    torch.set_num_threads(threads)


def device() -> str:
    """'cuda' when a GPU is usable, else 'cpu'."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def vllm_available() -> bool:
    """vLLM is importable and a GPU is present (both are needed for vLLM rollouts)."""
    import importlib.util

    return importlib.util.find_spec("vllm") is not None and device() == "cuda"


def fingerprint() -> dict[str, Any]:
    """Every switch that can change an output: package and library versions, device, thread
    counts, deterministic-algorithm flags, the CPU kernels' instruction-set level, and the
    offline and telemetry variables (with what the hub actually does)."""
    import torch

    dev = device()
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "packages": _versions(_PACKAGES),
        "libraries": _versions(_LIBRARIES),
        "device": dev,
        "device_name": torch.cuda.get_device_name(0) if dev == "cuda" else platform.processor() or "cpu",
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        # ATen dispatches CPU kernels by the instruction set it finds (default, avx2, avx512):
        # their sums round differently, so two machines can train different bytes.
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        # MKL picks its matrix kernels (and their blocking) by the processor itself, and
        # one policy built on pinned kernels came out other bytes on an AMD machine than on
        # an Intel one (training/tiny_build.py): the same level is not the same arithmetic.
        "cpu_model": cpu_model(),
        "mkldnn": torch.backends.mkldnn.is_available(),
        "hub_offline": hub_offline(),
        "switches": switches(),
        "replay_tolerances": replay_tolerances(dev),
    }


@cache
def cpu_model() -> str:
    """The processor's model name as Linux reports it ("AMD EPYC ...", "Intel(R) Xeon(R)
    ..."), else what `platform` knows, else the architecture. Read once a process: every
    result's fingerprint carries it, and /proc/cpuinfo grows with the cores."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                key, sep, value = line.partition(":")
                if sep and key.strip() == "model name":
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


_SCORES = ("avg_at_k", "pass_at_k", "component_means.*")


def replay_tolerances(device: str) -> dict[str, float]:
    """The absolute tolerances a result recorded on `device` is replayed with on a machine
    that is not bit-reproducible with it (fleet/tolerance.py): the evaluation scores, whose
    samples change with the arithmetic; a GPU's kernels are not deterministic at all, so
    it gets more room. Everything else is compared exactly unless `--tolerance` says so."""
    return dict.fromkeys(_SCORES, 0.02 if device == "cpu" else 0.03)


def _versions(names: tuple[str, ...]) -> dict[str, str]:
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found
