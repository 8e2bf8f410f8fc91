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
from importlib import metadata
from typing import Any

_PACKAGES = ("torch", "transformers", "trl", "accelerate", "tokenizers", "safetensors", "numpy", "vllm", "gguf")


def offline() -> None:
    """Never reach for a model hub: machines running evotrainer may have no internet."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # Telemetry calls would block on a machine without network.
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


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
    """Package versions, device and thread count: the environment part of a result."""
    import torch

    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    dev = device()
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "packages": versions,
        "device": dev,
        "device_name": torch.cuda.get_device_name(0) if dev == "cuda" else platform.processor() or "cpu",
        "threads": torch.get_num_threads(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
    }
