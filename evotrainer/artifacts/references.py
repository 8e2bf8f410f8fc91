"""Which artifacts the event log points at, so `audit --artifacts` can re-hash each one.

An artifact reference is any payload field named `*_sha256` (weights, evidence,
per-problem results) holding a 64-hex id. Works on any object with `.payload`, `.ref`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Protocol

import orjson

from evotrainer.artifacts.store import is_artifact_id


class _EventLike(Protocol):
    payload: dict[str, Any]

    @property
    def ref(self) -> object: ...


# How a field named *sha256 holding a string starts in JSON text: a quote inside a string
# value is written escaped (\"), so only a key ends this way.
_REFERENCE_KEY = b'sha256":"'


def artifact_fields(payload: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(dotted field path, sha256) of every artifact reference in a payload, in order."""
    try:
        # Most payloads of a fleet's log hold no reference at all: orjson writes one out
        # and a byte search rules it out in a fraction of the time a walk in Python takes
        # (a projection rebuild looks at every payload of the log).
        if _REFERENCE_KEY not in orjson.dumps(payload):
            return iter(())
    except TypeError:
        pass  # not JSON (a key that is not a string, say): the walk decides
    found: list[tuple[str, str]] = []
    _walk(payload, "", found)
    return iter(found)


def _walk(value: dict[str, Any] | list[Any], path: str, found: list[tuple[str, str]]) -> None:
    # A plain recursion into containers only, with a path spelled out only for what is
    # found or descended into: a projection rebuild walks every payload of the log, and
    # most of their values are scalars (a recursive generator cost 7 us an event).
    if isinstance(value, dict):
        for key, item in value.items():
            if key.endswith("sha256") and is_artifact_id(item):
                found.append((f"{path}.{key}" if path else key, item))
            elif isinstance(item, dict | list):
                _walk(item, f"{path}.{key}" if path else key, found)
    else:
        for i, item in enumerate(value):
            if isinstance(item, dict | list):
                _walk(item, f"{path}[{i}]", found)


def referenced_artifacts(events: Iterable[_EventLike]) -> dict[str, list[str]]:
    """{sha256: ["EXP/BRANCH@SEQ field", ...]} for every artifact id the events mention."""
    found: dict[str, list[str]] = {}
    for event in events:
        for field, sha in artifact_fields(event.payload):
            found.setdefault(sha, []).append(f"{event.ref} {field}")
    return found
