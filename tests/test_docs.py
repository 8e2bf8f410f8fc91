"""The documentation: every page a docstring names exists, and the site builds with
warnings as errors, its CLI reference listing every command (`make docs`)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MKDOCS = ROOT / ".venv" / "bin" / "mkdocs"


def test_every_docs_page_the_code_names_exists() -> None:
    named = {(path, page) for path in (ROOT / "evotrainer").rglob("*.py")
             for page in re.findall(r"\bdocs/[\w./-]+\.md\b", path.read_text(encoding="utf-8"))}  # fmt: skip
    assert named, "no docstring names a docs page: the pattern is wrong"
    missing = sorted(f"{path.relative_to(ROOT)}: {page}" for path, page in named if not (ROOT / page).exists())
    assert not missing


def test_every_page_is_in_the_navigation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert [p for p in pages if f": {p}" not in nav] == []


@pytest.mark.skipif(not MKDOCS.exists(), reason="the docs extra is not installed")
def test_the_site_builds_strict_with_every_command(tmp_path: Path) -> None:
    from evotrainer.cli import COMMANDS

    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([str(MKDOCS), "build", "--strict", "--quiet", "--site-dir", str(tmp_path)], cwd=ROOT,
                          env=env, capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    cli = (tmp_path / "cli" / "index.html").read_text(encoding="utf-8")
    assert [name for name in COMMANDS if f"Usage: evotrainer {name} " not in cli] == []
    api = (tmp_path / "api" / "index.html").read_text(encoding="utf-8")
    assert 'id="evotrainer.client.client.Client.sql"' in api


def test_the_readme_python_example_runs_as_written(cli_env: dict[str, str]) -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    example = re.search(r"```python\n(.*?)```", text, re.S)
    assert example is not None and len(example.group(1).strip().splitlines()) == 5
    python = ROOT / ".venv" / "bin" / "python"
    done = subprocess.run([str(python), "-c", example.group(1)], env={**cli_env, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["seq", "branch", "type", "0", "1", "main", "ExperimentCreated",
                                   "1", "2", "idea", "BranchForked"]  # fmt: skip
