"""The base of every event payload model, the catalogue registry and payload upcasting.

An event type is a frozen pydantic model named in the past tense. Its class name is the
stored `type`; `schema_version` is the payload version. When a payload changes shape, the
old model stays registered (so its schema keeps being exported and validated) and an
upcaster turns stored old payloads into the new shape on read: history is never edited.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict

from evotrainer.errors import UsageError

Payload = dict[str, Any]
SHA256_PATTERN = r"^[0-9a-f]{64}$"
"""How payloads spell an artifact or hash id: lowercase hex sha256."""
Upcaster = Callable[[Payload], Payload]


class Event(BaseModel):
    """An immutable event payload. Subclasses are registered with `@register`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    event_type: ClassVar[str]
    schema_version: ClassVar[int] = 1


E = TypeVar("E", bound=type[Event])

_models: dict[tuple[str, int], type[Event]] = {}
_latest: dict[str, int] = {}
_upcasters: dict[tuple[str, int], Upcaster] = {}


def register(model: E) -> E:
    """Class decorator: add a payload model to the catalogue under its class name.

    A model for an older version sets `event_type` explicitly to the shared type name.
    """
    event_type = model.__dict__.get("event_type") or model.__name__
    model.event_type = event_type
    key = (event_type, model.schema_version)
    if key in _models:
        raise ValueError(f"{event_type} v{model.schema_version} is registered twice")
    _models[key] = model
    _latest[event_type] = max(_latest.get(event_type, 0), model.schema_version)
    return model


def upcaster(event_type: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
    """Decorator: register the function that turns a v`from_version` payload into v+1."""

    def decorate(fn: Upcaster) -> Upcaster:
        _upcasters[(event_type, from_version)] = fn
        return fn

    return decorate


def event_types() -> list[str]:
    """Every registered event type, sorted."""
    return sorted(_latest)


def latest_version(event_type: str) -> int:
    """The current payload version of a type; unknown types are a usage error."""
    try:
        return _latest[event_type]
    except KeyError:
        raise UsageError(
            f"unknown event type {event_type!r}; known types: {', '.join(event_types())}"
        ) from None


def model_for(event_type: str, version: int | None = None) -> type[Event]:
    """The payload model of a type at a version (the latest when omitted)."""
    version = version or latest_version(event_type)
    try:
        return _models[(event_type, version)]
    except KeyError:
        raise UsageError(f"{event_type} has no schema version {version}") from None


def all_models() -> list[type[Event]]:
    """Every registered (type, version) model, ordered by type then version."""
    return [_models[key] for key in sorted(_models)]


def upcast(event_type: str, version: int, payload: Payload) -> tuple[int, Payload]:
    """Bring a stored payload to the latest version of its type, one step at a time."""
    latest = _latest.get(event_type, version)
    while version < latest:
        step = _upcasters.get((event_type, version))
        if step is None:
            raise ValueError(f"no upcaster from {event_type} v{version} to v{version + 1}")
        payload = step(payload)
        version += 1
    return version, payload
