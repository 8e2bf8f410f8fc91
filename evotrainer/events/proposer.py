"""Events of the trainers that are not code: a proposer's replies and the human gates.

A proposer that is not the built-in rule engine (an LLM, a human, an agent) is a source of
non-determinism, so what it said is recorded before anything acts on it: a resumed run and
`replay` read the recorded reply instead of asking again. A human gate is a request that
waits (DecisionRequested) and the answer someone gave (DecisionRecorded).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from evotrainer.events.base import Event, register

ProposerKind = Literal["rules", "llm", "human", "agent"]
Subject = Literal["proposal", "intervention", "promotion"]


@register
class ProposerReplied(Event):
    """One reply of a proposer to one request, as received, and what validation made of it."""

    request_key: str = Field(min_length=1, description="the round and attempt this reply answers (its idempotency key)")
    proposer: ProposerKind
    model: str | None = Field(default=None, description="the model that answered (llm)")
    attempt: int = Field(ge=1, description="1 for the first ask, 2 for the retry that showed the model its error")
    messages: list[dict[str, Any]] = Field(default_factory=list, description="what the proposer was sent")
    reply: str | None = Field(default=None, description="the raw reply; None when no reply came (see error)")
    proposal: dict[str, Any] | None = Field(
        default=None, description="the validated change: field, value, hypothesis, criterion, rollback"
    )
    accepted: bool
    reason: str = Field(default="", description="why the reply was rejected, or why no reply came")
    prompt_tokens: int | None = Field(default=None, ge=0)
    completion_tokens: int | None = Field(default=None, ge=0)
    latency_s: float = Field(ge=0, description="wall seconds from the request to the reply (retries included)")


@register
class DecisionRequested(Event):
    """A human gate: the loop stopped here until someone approves, revises or aborts."""

    request_id: str = Field(min_length=1, description="what `evotrainer approve|revise|abort` name")
    subject: Subject = Field(description="a change to propose, an intervention to run, or a promotion to make")
    branch: str = Field(description="EXPERIMENT/BRANCH the decision is about")
    why: str = Field(description="which autonomy rule asked for a human")
    proposal: dict[str, Any] | None = Field(default=None, description="the change on the table, if any")
    details: dict[str, Any] = Field(default_factory=dict, description="evidence shown to the human")


@register
class DecisionRecorded(Event):
    """The answer to a DecisionRequested; the loop resumes from it."""

    request_id: str = Field(min_length=1)
    decision: Literal["approved", "revised", "aborted"]
    changes: dict[str, Any] = Field(default_factory=dict, description="revised: the one FIELD=VALUE to run instead")
    note: str = ""
