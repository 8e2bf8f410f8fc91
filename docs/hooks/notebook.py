"""MkDocs hook: puts examples/notebook.ipynb into the site as the "Notebook" page.

mkdocs-jupyter renders the page. It renders whatever outputs the file holds, so the hook
takes the copy that `tests/test_notebook.py` executed (build/notebook.ipynb, written by
the test run that `make test` does before it builds the docs) where there is one, else
the notebook as committed, whose cells carry no outputs. The copy goes to
docs/notebook.ipynb (git-ignored) before MkDocs collects the pages.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
EXECUTED = ROOT / "build" / "notebook.ipynb"
SOURCE = ROOT / "examples" / "notebook.ipynb"
PAGE = ROOT / "docs" / "notebook.ipynb"


def on_pre_build(config: Any, **_: Any) -> None:
    # An executed copy older than the notebook is stale: the source wins then.
    fresh = EXECUTED.is_file() and EXECUTED.stat().st_mtime >= SOURCE.stat().st_mtime
    shutil.copyfile(EXECUTED if fresh else SOURCE, PAGE)
