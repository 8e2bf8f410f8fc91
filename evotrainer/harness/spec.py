"""The harness spec: everything that interprets rollouts and shapes training, as one value.

A harness version is a frozen pydantic model addressed by the sha256 of its canonical JSON
(sorted keys, compact separators), so two equal specs have one address anywhere. Its
sections are reward components and weights, data and group filters, GRPO hyperparameters,
the diagnostic suite with its thresholds, the evaluation protocol and the promotion gate.
Interventions name one leaf by a dotted path (`rewards.weights.format`, `grpo.temperature`,
`diagnostics.dead_group_ratio.warning`); `get_field` / `with_field` / `diff` work on those.

The thresholds below are the EvoTrainer authors' (METHOD.md) as defaults, never constants
in the analyzers: a harness version may change any of them, and that change is recorded.

    spec = HarnessSpec()
    spec.address()                                   # 64 hex characters
    spec.with_field("grpo.temperature", 1.2)         # a new, validated spec
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from evotrainer.errors import UsageError

Direction = Literal["above", "below"]


class InvalidHarnessError(UsageError):
    """A harness spec (or a change to one) does not validate."""


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RewardSpec(_Section):
    """How the domain's separately reported components become the scalar GRPO reward."""

    weights: dict[str, float] = Field(default_factory=lambda: {"correctness": 1.0})
    correctness_component: str = "correctness"
    """The binary ground truth that shaped components are checked against (reward hacking)."""

    @field_validator("weights")
    @classmethod
    def _finite_and_some_nonzero(cls, weights: dict[str, float]) -> dict[str, float]:
        if not weights or not any(w != 0 for w in weights.values()):
            raise ValueError("give at least one reward component a non-zero weight (otherwise GRPO has no signal)")
        if not all(math.isfinite(w) for w in weights.values()):
            raise ValueError("reward weights must be finite numbers")
        return dict(sorted(weights.items()))


class FilterSpec(_Section):
    """Data and group filters (what reaches the loss)."""

    drop_zero_variance_groups: bool = False
    min_group_std: float = Field(default=1e-3, ge=0)
    """A group whose reward std is below this is dead: no gradient (METHOD: std < 0.001)."""
    mask_truncated_completions: bool = False
    max_prompt_length: int = Field(default=256, ge=1)
    levels: tuple[str, ...] = ()


class GRPOSpec(_Section):
    """GRPO hyperparameters; with `rewards` and `filters` they map 1:1 onto GRPOSettings."""

    num_generations: int = Field(default=8, ge=2)
    prompts_per_step: int = Field(default=4, ge=1)
    learning_rate: float = Field(default=1e-3, gt=0, lt=1)
    beta: float = Field(default=0.0, ge=0)
    temperature: float = Field(default=1.0, gt=0)
    top_p: float = Field(default=1.0, gt=0, le=1)
    max_completion_length: int = Field(default=16, ge=1)
    loss_type: Literal["grpo", "dr_grpo", "dapo", "bnpo"] = "dapo"
    scale_rewards: Literal["group", "batch", "none"] = "group"
    epsilon: float = Field(default=0.2, gt=0, lt=1)
    epsilon_high: float | None = None
    max_steps: int = Field(default=20, ge=1)
    seed: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _clip_higher_above_epsilon(self) -> GRPOSpec:
        if self.epsilon_high is not None and self.epsilon_high < self.epsilon:
            raise ValueError(f"epsilon_high {self.epsilon_high} is below epsilon {self.epsilon}; set it >= epsilon")
        return self


class AnalyzerSettings(_Section):
    """One analyzer in the suite: whether it runs, its version and its alert thresholds."""

    enabled: bool = True
    version: int = Field(default=1, ge=1)
    direction: Direction = "above"
    """`above`: larger values are worse (alert when value > threshold); `below`: the reverse."""
    warning: float | None = None
    critical: float | None = None
    params: dict[str, float] = Field(default_factory=dict)
    """Analyzer-specific knobs (minimum rise, per-completion cut-offs, ...)."""

    @model_validator(mode="after")
    def _critical_beyond_warning(self) -> AnalyzerSettings:
        w, c = self.warning, self.critical
        if w is not None and c is not None and (c < w if self.direction == "above" else c > w):
            raise ValueError(f"critical {c} is less severe than warning {w} for direction {self.direction!r}")
        return self


def _a(warning: float | None, critical: float | None = None, direction: Direction = "above",
       **params: float) -> AnalyzerSettings:  # fmt: skip
    return AnalyzerSettings(warning=warning, critical=critical, direction=direction, params=params)


def default_diagnostics() -> dict[str, AnalyzerSettings]:
    """The built-in suite with METHOD.md's thresholds (approximations marked)."""
    return {
        # Score
        "avg_at_k": _a(0.0, None, "above", min_gain=0.0),  # value: shortfall below the best previous
        # Signal
        "dead_group_ratio": _a(0.30, 0.50),
        "reward_spread": _a(0.05, 0.01, "below"),
        "reward_discreteness": _a(0.50, 0.80),  # share held by the most common reward value
        "advantage_health": _a(0.05, 0.20),  # share of live groups with degenerate advantages
        # Behaviour
        "format_failure_rate": _a(0.30, 0.60),
        "truncation_rate": _a(0.20, 0.50),
        "length_drift": _a(0.50, 2.00),  # relative growth of mean length, first to last steps
        "length_reward_correlation": _a(0.30, 0.60),
        "repetition_rate": _a(0.10, 0.30, per_completion=0.50),
        "echo_ratio": _a(1.50, 3.00),  # failed rollouts' turns (or length) over the rest
        "diversity_drop": _a(0.10, 0.25),  # distinct completions per group, points lost
        "tool_failure_rate": _a(0.15, 0.50),
        "edit_failure_rate": _a(0.15, 0.40),
        "self_test_drop": _a(0.30, 0.60),  # relative drop in test runs per rollout
        "test_tampering": _a(0.0, 0.05),
        "history_peeking": _a(0.0, 0.05),
        "reward_hacking": _a(0.10, 0.30, flat=0.02),  # shaped rise minus correctness rise
    }


class EvaluationSpec(_Section):
    """How a version is scored: Avg@k on the held-out split (the authors: Avg@8 at T=1.0).

    The gate compares versions on the held-out split's selection half only; its test half is
    kept for final reports (`evotrainer compare`), so the winner of many comparisons is not
    reported on the problems it was selected on."""

    k: int = Field(default=8, ge=1)
    temperature: float = Field(default=1.0, ge=0)
    eval_tasks: int = Field(default=32, ge=1)
    """Problems in each half (selection, test) of the held-out split."""
    max_completion_length: int = Field(default=16, ge=1)
    """Fixed apart from training's budget, so a change to that does not change the protocol."""
    seed: int = 0


VALIDITY_ANALYZERS = ("reward_hacking", "test_tampering", "history_peeking", "echo_ratio",
                      "length_reward_correlation")  # fmt: skip
"""Findings that say a branch's score is not to be trusted (it games the reward, reads the
answer, edits the tests, loops): these veto a promotion. Signal-health findings (dead
groups, discreteness, spread) describe how well a run learns, not whether its score is
real; on a binary reward they mostly mean "accuracy is still low". They drive proposals,
and veto only when a gate lists them (a gate change, which needs a human or an override)."""


class PromotionSpec(_Section):
    """The gate: beat the best so far beyond noise (the lower bound of a paired bootstrap
    interval of the gain clears `min_margin`), with no blocking validity finding."""

    min_margin: float = Field(default=0.0, ge=0)
    """The interval's lower bound must exceed this."""
    confidence: float = Field(default=0.95, gt=0.5, lt=1)
    """Two-sided level of the bootstrap interval of the per-problem gain."""
    bootstrap_samples: int = Field(default=2000, ge=100)
    blocking_severity: Literal["warning", "critical"] = "critical"
    blocking_analyzers: tuple[str, ...] = VALIDITY_ANALYZERS
    """Analyzers whose findings (at `blocking_severity`) veto."""
    blocking_conditions: tuple[str, ...] = ("reward_hacking", "leaked_reference")


class RevisionSpec(_Section):
    """When a new or changed analyzer may join the suite (retro-validation)."""

    min_balanced_accuracy: float = Field(default=0.75, ge=0.5, le=1)
    min_runs_per_label: int = Field(default=3, ge=3)
    """Labelled runs of each kind (promoted, rejected) an analyzer is checked on: with one of
    each, any analyzer that happens to differ between two runs would pass."""


class HarnessSpec(_Section):
    """One harness version. Its address is the sha256 of `canonical_json()`."""

    rewards: RewardSpec = Field(default_factory=RewardSpec)
    filters: FilterSpec = Field(default_factory=FilterSpec)
    grpo: GRPOSpec = Field(default_factory=GRPOSpec)
    diagnostics: dict[str, AnalyzerSettings] = Field(default_factory=default_diagnostics)
    evaluation: EvaluationSpec = Field(default_factory=EvaluationSpec)
    promotion: PromotionSpec = Field(default_factory=PromotionSpec)
    revision: RevisionSpec = Field(default_factory=RevisionSpec)

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> HarnessSpec:
        """Validate a JSON object as a spec; InvalidHarnessError names the bad fields."""
        try:
            return cls.model_validate(dict(data))
        except ValidationError as exc:
            raise InvalidHarnessError(f"invalid harness spec: {_describe(exc)}") from None

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def canonical_json(self) -> bytes:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()

    def address(self) -> str:
        """The spec's content hash (its harness_hash in events)."""
        return hashlib.sha256(self.canonical_json()).hexdigest()

    def get_field(self, path: str) -> Any:
        """The JSON value at a dotted path; InvalidHarnessError for a path that is not there."""
        node: Any = self.to_json()
        for i, part in enumerate(path.split(".")):
            if not isinstance(node, dict) or part not in node:
                where = ".".join(path.split(".")[:i]) or "the spec"
                known = ", ".join(sorted(node)) if isinstance(node, dict) else "none (it is a value)"
                raise InvalidHarnessError(f"no harness field {path!r}: {where} has fields {known}")
            node = node[part]
        return node

    def with_field(self, path: str, value: Any) -> HarnessSpec:
        """A new validated spec with one field set. A new key may be added under a mapping
        (a new reward weight, a new analyzer), never under a fixed section."""
        data = self.to_json()
        parts = path.split(".")
        node = data
        for i, part in enumerate(parts[:-1]):
            if not isinstance(node.get(part), dict):
                self.get_field(".".join(parts[: i + 1]))  # raises with the known fields
                raise InvalidHarnessError(f"harness field {'.'.join(parts[: i + 1])!r} is a value, not a section")
            node = node[part]
        if parts[-1] not in node and not _is_mapping_field(".".join(parts[:-1])):
            self.get_field(path)  # raises, naming the fields that exist there
        node[parts[-1]] = value
        try:
            return HarnessSpec.model_validate(data)
        except ValidationError as exc:
            raise InvalidHarnessError(f"cannot set {path} = {json.dumps(value)}: {_describe(exc)}") from None

    def to_grpo_settings(self, **overrides: Any) -> Any:
        """The training part as GRPOSettings (imported here: the harness stays light)."""
        from evotrainer.training.grpo_config import GRPOSettings

        g, f = self.grpo, self.filters
        values = {
            "reward_weights": dict(self.rewards.weights),
            **g.model_dump(),
            "max_prompt_length": f.max_prompt_length,
            "mask_truncated_completions": f.mask_truncated_completions,
            "drop_zero_variance_groups": f.drop_zero_variance_groups,
            "min_group_std": f.min_group_std,
            "levels": tuple(f.levels),
            **overrides,
        }
        return GRPOSettings(**values)


def _is_mapping_field(path: str) -> bool:
    """Fields whose keys are open (new reward components, analyzers, analyzer knobs)."""
    parts = path.split(".")
    return path in ("rewards.weights", "diagnostics") or (
        len(parts) == 3 and parts[0] == "diagnostics" and parts[2] == "params"
    )


def leaves(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every (dotted path, JSON value) leaf; lists and tuples count as one value."""
    if isinstance(value, dict) and value:
        for key in sorted(value):
            yield from leaves(value[key], f"{prefix}.{key}" if prefix else key)
    else:
        yield prefix, value


_MISSING = object()


def diff(a: HarnessSpec, b: HarnessSpec) -> list[tuple[str, Any, Any]]:
    """(path, value in a, value in b) for every leaf that differs; a missing side is None."""
    left, right = dict(leaves(a.to_json())), dict(leaves(b.to_json()))
    out = []
    for path in sorted(set(left) | set(right)):
        x, y = left.get(path, _MISSING), right.get(path, _MISSING)
        if x != y:
            out.append((path, None if x is _MISSING else x, None if y is _MISSING else y))
    return out


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        parts.append(f"{loc}: {err['msg']}" if loc else err["msg"])
    return "; ".join(parts)
