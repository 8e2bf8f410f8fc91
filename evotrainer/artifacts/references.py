"""Which artifacts the event log points at, so `audit --artifacts` can re-hash each one.

An artifact reference is any payload field named `*_sha256` (weights, evidence,
per-problem results) holding a 64-hex id. Works on any object with `.payload`, `.ref`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class _EventLike(Protocol):
    payload: dict[str, Any]

    @property
    def ref(self) -> object: ...


def _walk(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, dict):
        for key, item in value.items():
            child = f"{path}.{key}" if path else key
            if key.endswith("sha256") and isinstance(item, str) and _SHA256.match(item):
                yield child, item
            else:
                yield from _walk(item, child)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _walk(item, f"{path}[{i}]")


def referenced_artifacts(events: Iterable[_EventLike]) -> dict[str, list[str]]:
    """{sha256: ["EXP/BRANCH@SEQ field", ...]} for every artifact id the events mention."""
    found: dict[str, list[str]] = {}
    for event in events:
        for field, sha in _walk(event.payload, ""):
            found.setdefault(sha, []).append(f"{event.ref} {field}")
    return found
