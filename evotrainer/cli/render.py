"""How commands print: JSON for scripts and agents, compact tables for people."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import orjson


def print_line(line: str = "") -> None:
    sys.stdout.write(line + "\n")


def print_json(value: Any) -> None:
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode() + "\n")


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A plain aligned table: stable to read in transcripts and to grep."""
    cells = [[str(h) for h in headers], *[["" if c is None else str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        sys.stdout.write("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() + "\n")


def summarize(payload: dict[str, Any], width: int = 70) -> str:
    """A one-line digest of a payload for logs and listings."""
    parts = []
    for key, value in payload.items():
        if value in (None, "", [], {}):
            continue
        text = orjson.dumps(value).decode() if not isinstance(value, str) else value
        if len(text) > 24:
            text = text[:21] + "..."
        parts.append(f"{key}={text}")
    line = " ".join(parts)
    return line if len(line) <= width else line[: width - 3] + "..."
