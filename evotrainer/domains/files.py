"""Datasets from files (`math:file=PATH`, `code:file=PATH`): reading them, and their task ids.

A file's problems keep the file's own ids (`id`, `task_id`, `instance_id`, or `unique_id`
as MATH-500 has it) so that a user can name them (`evotrainer domains score`); a line
without one gets a name built from the file and the line. Every error names file:line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from evotrainer.errors import UsageError

ID_FIELDS = ("id", "task_id", "instance_id", "unique_id")
"""Fields a line's own task id is read from; the first present wins."""


def read_lines(path: Path) -> Iterator[str]:
    """The file's lines; UsageError (one line) when it cannot be read as UTF-8 text."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory, not a JSONL file") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        line = text_line_of(path, exc.start)
        raise UsageError(f"{path}:{line}: not UTF-8 text") from None
    # Lines end at "\n" (and "\r\n") only: str.splitlines also splits at U+2028 and
    # others, which JSON strings may hold as they are.
    for text_line in text.split("\n"):
        yield text_line.removesuffix("\r")


def json_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON) for each non-blank line; UsageError naming file:line for
    a line that is not JSON, or a file that cannot be read."""
    for lineno, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        try:
            yield lineno, json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}:{lineno}: not JSON ({exc.msg})") from None
        except (ValueError, RecursionError) as exc:  # an integer of 4,300+ digits; nesting past the stack
            raise UsageError(f"{path}:{lineno}: not JSON this reader takes ({type(exc).__name__})") from None


def text_line_of(path: Path, offset: int) -> int:
    return path.read_bytes()[:offset].count(b"\n") + 1


def file_task_id(row: dict[str, Any], fallback: str) -> str:
    """The row's own id when it has one, else `fallback`."""
    for name in ID_FIELDS:
        value = row.get(name)
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value).strip():
            return str(value).strip()
    return fallback


class TaskIds:
    """Refuses an id a file uses twice, naming both lines."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: dict[str, int] = {}

    def add(self, task_id: str, lineno: int) -> str:
        if task_id in self._seen:
            raise UsageError(f"{self.path}:{lineno}: task id {task_id!r} already used on line {self._seen[task_id]}")
        self._seen[task_id] = lineno
        return task_id
