"""Events that shape the lineage itself: experiments and branches."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from evotrainer.events.base import SHA256_PATTERN, Event, register

Domain = Literal["math", "code", "swe"]


@register
class ExperimentCreated(Event):
    """The first event of an experiment's main branch."""

    name: str = Field(min_length=1, max_length=100)
    domain: Domain | None = None
    description: str = ""
    base_policy: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)


@register
class BranchForked(Event):
    """The first own event of a branch: it inherits the parent's first `fork_seq` events."""

    parent: str = Field(description="EXPERIMENT/BRANCH of the parent")
    fork_seq: int = Field(ge=0)
    fork_hash: str = Field(pattern=SHA256_PATTERN, description="hash of the parent's event at fork_seq")
    reason: str = ""
