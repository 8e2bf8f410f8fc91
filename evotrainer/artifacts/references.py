"""Which artifacts the event log points at, so `audit --artifacts` can re-hash each one.

An artifact reference is any payload field named `*_sha256` (weights, evidence,
per-problem results) holding a 64-hex id. Works on any object with `.payload`, `.ref`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from evotrainer.artifacts.store import is_artifact_id


class _EventLike(Protocol):
    payload: dict[str, Any]

    @property
    def ref(self) -> object: ...


def artifact_fields(payload: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(dotted field path, sha256) of every artifact reference in a payload, in order."""
    return _walk(payload, "")


def _walk(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, dict):
        for key, item in value.items():
            child = f"{path}.{key}" if path else key
            if key.endswith("sha256") and is_artifact_id(item):
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
        for field, sha in artifact_fields(event.payload):
            found.setdefault(sha, []).append(f"{event.ref} {field}")
    return found
