"""The value objects that cross the store's boundary: events to append and stored events."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import TYPE_CHECKING, Any, NamedTuple

from evotrainer.refs import BranchRef

if TYPE_CHECKING:
    from evotrainer.events import Event

NEWER_VERSIONS: dict[str, int] = {"TaskRequested": 2}
"""The latest payload version of each built-in event type that has more than one, known
without importing the event catalogue (its pydantic models take longer to import than
`evotrainer log` takes to run). A payload stored at its type's latest version needs no
upcasting, and reading it needs no catalogue. A test checks this against the catalogue."""


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append. `payload` is a plain JSON object or an event model."""

    type: str
    payload: dict[str, Any] = field(default_factory=dict)
    idempotency_key: str | None = None
    causation_id: str | None = None
    correlation_id: str | None = None
    actor: str | None = None

    @classmethod
    def of(cls, event: Event, **metadata: Any) -> NewEvent:
        """Wrap a payload model; metadata are the keyword fields of NewEvent."""
        return cls(type=event.event_type, payload=event.model_dump(mode="json"), **metadata)


@dataclass(frozen=True, order=True)
class GlobalPosition:
    """Where a reader stands in the global order: (committing transaction, position).

    Positions are handed out before commit, so two transactions can commit out of
    position order; ordering by transaction id first, and reading only transactions that
    can no longer be running, is what keeps readers from skipping a late committer.
    """

    transaction_id: int = 0
    position: int = 0


class StoredEvent(NamedTuple):
    """An event as recorded, its payload upcast to the latest version of its type.

    A named tuple rather than a frozen dataclass: one is built for every event read or
    written, and a frozen dataclass takes several times longer to construct.
    """

    position: int
    transaction_id: int
    event_id: str
    experiment: str
    branch: str
    seq: int
    type: str
    schema_version: int
    payload: dict[str, Any]
    causation_id: str | None
    correlation_id: str | None
    idempotency_key: str | None
    actor: str
    recorded_at: datetime
    prev_hash: str
    hash: str

    @property
    def ref(self) -> BranchRef:
        return BranchRef(self.experiment, self.branch, self.seq)

    @property
    def global_position(self) -> GlobalPosition:
        return GlobalPosition(self.transaction_id, self.position)

    def model(self) -> Event:
        """The payload as its typed, frozen event model."""
        from evotrainer.events import model_for

        return model_for(self.type, self.schema_version).model_validate(self.payload)

    def to_json(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "event_id": self.event_id,
            "experiment": self.experiment,
            "branch": self.branch,
            "seq": self.seq,
            "type": self.type,
            "schema_version": self.schema_version,
            "payload": self.payload,
            "causation_id": self.causation_id,
            "correlation_id": self.correlation_id,
            "idempotency_key": self.idempotency_key,
            "actor": self.actor,
            "recorded_at": self.recorded_at.isoformat(),
            "prev_hash": self.prev_hash,
            "hash": self.hash,
        }


def row_to_event(row: tuple[Any, ...]) -> StoredEvent:
    (position, txid, event_id, experiment, branch, seq, type_, version, payload, causation,
     correlation, key, actor, recorded_at, prev_hash, hash_) = row
    version, payload = upcast(type_, version, payload)
    return StoredEvent(
        position, int(txid), event_id, experiment, branch, seq, type_, version, payload,
        causation, correlation, key, actor, recorded_at, prev_hash, hash_,
    )


def upcast(event_type: str, version: int, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """evotrainer.events.upcast, without importing the catalogue for a payload that is
    current. Once the catalogue is imported (by an append, or by a plugin that registers
    event types of its own) it is always asked: only it knows the plugins' types."""
    if "evotrainer.events.base" not in sys.modules and version >= NEWER_VERSIONS.get(event_type, 1):
        return version, payload
    return _catalogue_upcast()(event_type, version, payload)


@cache
def _catalogue_upcast() -> Callable[[str, int, dict[str, Any]], tuple[int, dict[str, Any]]]:
    """The catalogue's upcast, imported once (an import statement per event read cost
    about a microsecond each, a few percent of a rebuild)."""
    from evotrainer.events import upcast as catalogue_upcast

    return catalogue_upcast
