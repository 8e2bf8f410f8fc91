"""Fixtures of the training tests: an isolated artifact store and the digit-addition math domain.

The store is shared by the module's tests so the tiny policy's warm start is built once.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def store(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from evotrainer.artifacts import open_store

    return open_store(Path(tmp_path_factory.mktemp("artifacts")))


DOMAIN = "math:digit_add"
"""The math level a ~1M-parameter character model can learn in seconds."""


@pytest.fixture(scope="session")
def math_domain():  # type: ignore[no-untyped-def]
    from evotrainer.domains import get_domain

    return get_domain(DOMAIN)


def bench_script(name: str) -> ModuleType:
    """A script of bench/ as a module, so a test can call its main() with arguments."""
    path = Path(__file__).resolve().parents[2] / "bench" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
