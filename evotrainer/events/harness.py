"""Events about the training harness and its diagnostics."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from evotrainer.events.base import SHA256_PATTERN, Event, register

_SHA = SHA256_PATTERN
Severity = Literal["info", "warning", "critical"]


@register
class HarnessVersioned(Event):
    """A harness spec, addressed by the hash of its canonical encoding."""

    harness_hash: str = Field(pattern=_SHA)
    spec: dict[str, Any]
    parent_hash: str | None = Field(default=None, pattern=_SHA)
    changed_fields: list[str] = Field(default_factory=list)
    override: str | None = Field(
        default=None, description="why a diagnostic or gate change was recorded without retro-validation"
    )


class Finding(BaseModel):
    """One analyzer's verdict, pointing at the rollouts that show it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    analyzer: str
    analyzer_version: int = Field(ge=1)
    layer: Literal["score", "signal", "behaviour"]
    metric: str
    value: float | None
    severity: Severity
    message: str = ""
    rollouts: list[int] = Field(default_factory=list)


@register
class DiagnosisRecorded(Event):
    """The three-layer diagnosis of a run's evidence and the conditions it implies."""

    evidence: str = Field(pattern=_SHA)
    harness_hash: str | None = Field(default=None, pattern=_SHA)
    findings: list[Finding]
    conditions: list[str] = Field(default_factory=list)
    blocking: bool = False


@register
class DiagnosticRevised(Event):
    """An analyzer joined, changed in or left the harness after retro-validation."""

    analyzer: str
    analyzer_version: int = Field(ge=1)
    change: Literal["added", "changed", "removed"]
    thresholds: dict[str, float] = Field(default_factory=dict)
    gap: str = ""
    validation: dict[str, Any] = Field(default_factory=dict)
    accepted: bool
