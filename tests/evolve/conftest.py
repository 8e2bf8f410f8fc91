"""The artifact store the gate reads (open_store() under EVOTRAINER_HOME) is a fresh one
per test: the same folder `cli_env` gives the CLI, so evaluations recorded here are at
hand to `evotrainer promote` too. Tasks run in this process (no broker), as the loop's
tests expect."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _artifacts_in_tmp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EVOTRAINER_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("EVOTRAINER_ARTIFACTS", raising=False)
    monkeypatch.delenv("EVOTRAINER_BROKER_URL", raising=False)
