"""Events about interventions on the harness, their backtests, promotions and skills."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from evotrainer.events.base import SHA256_PATTERN, Event, register

_SHA = SHA256_PATTERN


@register
class InterventionProposed(Event):
    """A single-factor change to the harness with a falsifiable hypothesis."""

    intervention_id: str = Field(min_length=1)
    field: str = Field(min_length=1)
    old_value: Any = None
    new_value: Any = None
    hypothesis: str = Field(min_length=1)
    frozen_fields: list[str] = Field(default_factory=list)
    success_criterion: str = Field(min_length=1)
    rollback_plan: str = Field(min_length=1)
    proposer: str = "builtin"
    base_harness_hash: str | None = Field(default=None, pattern=_SHA)


@register
class BacktestCompleted(Event):
    """An intervention re-scored on stored evidence before any training compute."""

    intervention_id: str = Field(min_length=1)
    kind: str
    evidence: str = Field(pattern=_SHA)
    figures: dict[str, Any] = Field(default_factory=dict)
    criterion: str = ""
    passed: bool


@register
class PromotionDecided(Event):
    """Whether a candidate branch replaces the best so far, and the evidence for it."""

    candidate: str = Field(description="EXPERIMENT/BRANCH")
    decision: Literal["promoted", "rejected"]
    baseline_score: float | None = None
    candidate_score: float | None = None
    margin: float | None = None
    blocking_findings: list[str] = Field(default_factory=list)
    intervention_id: str | None = None
    evidence: dict[str, Any] = Field(default_factory=dict)
    reason: str = ""


@register
class SkillRecorded(Event):
    """A reusable lesson: trigger, intervention, expected outcome, validation, domains. Each
    event is one outcome of the skill (successes or failures 1); the library sums them."""

    skill_id: str = Field(min_length=1)
    trigger: str
    intervention: str
    expected_outcome: str
    validation: str = ""
    domains: list[str] = Field(default_factory=list)
    category: Literal[
        "reward_design", "filtering", "training_stability", "evaluation_protocol", "cross_domain_transfer"
    ]
    successes: int = Field(default=0, ge=0)
    failures: int = Field(default=0, ge=0)
    effect_size: float | None = None


@register
class SkillImported(Event):
    """A skill brought in from a skills file (`evotrainer skills import`), kept apart from
    the outcomes recorded here: its counts and effect sizes are the source's, and where it
    came from is part of the event. One event per skill per file."""

    skill_id: str = Field(min_length=1, pattern=r"^[a-z_]+/[\w.]+/(raise|lower|add|enable|disable|set)$")
    trigger: str = Field(min_length=1)
    intervention: str
    expected_outcome: str
    category: Literal[
        "reward_design", "filtering", "training_stability", "evaluation_protocol", "cross_domain_transfer"
    ]
    successes: int = Field(ge=0)
    failures: int = Field(ge=0)
    effect_sizes: list[float] = Field(default_factory=list)
    validated_in: list[str] = Field(default_factory=list, description="domains where it succeeded at least once")
    tried_in: list[str] = Field(default_factory=list)
    change: dict[str, Any] = Field(description="field, old_value, new_value: the change that validated it")
    source: dict[str, Any] = Field(description="file, file_sha256, exported_from, exported_at")


@register
class ComparisonRecorded(Event):
    """`evotrainer compare`: the loop against the fixed recipe at equal GRPO steps, over seeds,
    both final policies scored on the held-out test half (never used for selection)."""

    experiment: str = Field(min_length=1, description="the experiment file's name")
    config_sha256: str = Field(pattern=_SHA, description="sha256 of the experiment file's validated contents")
    budget_steps: int = Field(ge=1)
    seeds: list[dict[str, Any]] = Field(
        description="per seed: loop and fixed experiments, final policies, test scores, steps, wall seconds"
    )
    loop_mean: float
    fixed_mean: float
    gain: float = Field(description="loop minus fixed, mean over seeds and problems")
    interval: list[float] = Field(min_length=2, max_length=2, description="bootstrap interval of the gain")
    confidence: float = Field(gt=0, lt=1)
    problems: int = Field(ge=0, description="test problems per seed")
