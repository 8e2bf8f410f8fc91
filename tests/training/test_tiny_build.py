"""The tiny warm start is the same policy whatever matrix kernels the machine's MKL would
pick: the build pins them (tiny_build.py), so a machine's own choice, stood in for here
by each code path MKL_CBWR can force, leaves no trace in the weights."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from evotrainer.training.tiny import TinyRecipe
from evotrainer.training.tiny_build import build_portably


def _weights_digest(policy: Path) -> str:
    return hashlib.sha256((policy / "model.safetensors").read_bytes()).hexdigest()


def test_the_warm_start_is_the_same_whatever_path_mkl_would_take(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    recipe = TinyRecipe(sft_tasks=32, sft_steps=6, sft_batch_size=8)  # a few steps differ in every bit already
    digests = {}
    for path in ("AVX512", "AVX2", None):
        if path is None:
            monkeypatch.delenv("MKL_CBWR", raising=False)
        else:
            monkeypatch.setenv("MKL_CBWR", path)
        out = tmp_path / str(path)
        build_portably("math:digit_add", recipe, 0, out, threads=1)
        digests[path] = _weights_digest(out)
    assert len(set(digests.values())) == 1, digests
