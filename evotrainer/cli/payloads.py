"""Reading JSON payloads given on the command line, inline or as @FILE."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from evotrainer.errors import UsageError


def parse_payload(text: str) -> Any:
    source = "payload"
    if text.startswith("@"):
        path = Path(text[1:])
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror}") from None
        source = str(path)
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"{source} is not valid JSON: {exc}") from None
