"""Behaviour layer over completions: format, truncation, length, repetition, echo,
diversity, and reward hacking (a shaped reward rising while correctness stays flat).

Drifts compare the earlier half of the run's steps with the later half, so one evidence
artifact is enough; a metric that cannot apply (one step, no format component) is None.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from evotrainer.diagnostics.base import DiagnosisInput, Layer, Measurement, correlation, mean, ratio


@dataclass(frozen=True)
class FormatFailureRate:
    """Share of rollouts the domain's `format` component scores 0."""

    name: str = "format_failure_rate"
    version: int = 1
    layer: Layer = "behaviour"

    def measure(self, data: DiagnosisInput, params: Mapping[str, float]) -> Measurement:
        view = data.evidence
        if "format" not in view.components:
            return Measurement(None, message="the domain reports no format component")
        failed = [i for i, v in enumerate(view.component("format")) if not math.isnan(v) and v <= 0]
        scored = sum(1 for v in view.component("format") if not math.isnan(v))
        return Measurement(ratio(len(failed), scored), failed, f"{len(failed)} of {scored} rollouts fail the format")


@dataclass(frozen=True)
class TruncationRate:
    """Share of completions cut at the token budget."""

    name: str = "truncation_rate"
    version: int = 1
    layer: Layer = "behaviour"

    def measure(self, data: DiagnosisInput, params: Mapping[str, float]) -> Measurement:
        records = data.evidence.records
        cut = [i for i, r in enumerate(records) if r.truncated]
        return Measurement(ratio(len(cut), len(records)), cut, f"{len(cut)} of {len(records)} completions truncated")


@dataclass(frozen=True)
class LengthDrift:
    """Relative change of mean completion length from the earlier to the later steps."""

    name: str = "length_drift"
    version: int = 1
    layer: Layer = "behaviour"

    def measure(self, data: DiagnosisInput, params: Mapping[str, float]) -> Measurement:
        view = data.evidence
        halves = view.halves()
        if halves is None:
            return Measurement(None, message="one step: no drift to measure")
        early, late = (mean([float(view.records[i].completion_tokens) for i in h]) for h in halves)
        if early <= 0:
            return Measurement(None, message="early completions are empty")
        value = (late - early) / early
        longest = sorted(halves[1], key=lambda i: -view.records[i].completion_tokens)
        return Measurement(value, longest, f"mean completion tokens {early:.1f} -> {late:.1f} ({value:+.0%})")


@dataclass(frozen=True)
class LengthRewardCorrelation:
    """Pearson correlation of completion length with reward (> 0.3: length gaming)."""

    name: str = "length_reward_correlation"
    version: int = 1
    layer: Layer = "behaviour"

    def measure(self, data: DiagnosisInput, params: Mapping[str, float]) -> Measurement:
        view = data.evidence
        value = correlation([float(r.completion_tokens) for r in view.records], view.rewards)
        if math.isnan(value):
            return Measurement(None, message="length or reward does not vary")
        return Measurement(value, message=f"corr(length, reward) = {value:+.3f}")


def repeated_share(text: str, n: int = 4) -> float:
    """Share of a text's character n-grams that repeat an earlier one (0: none, ->1: loops)."""
    if len(text) < 2 * n:
        return 0.0
    grams = [text[i : i + n] for i in range(len(text) - n + 1)]
    return 1.0 - len(set(grams)) / len(grams)


@dataclass(frozen=True)
class RepetitionRate:
    """Share of completions whose repeated n-gram share exceeds `per_completion`."""

    name: str = "repetition_rate"
    version: int = 1
    layer: Layer = "behaviour"

    def measure(self, data: DiagnosisInput, params: Mapping[str, float]) -> Measurement:
        records = data.evidence.records
        cutoff = params.get("per_completion", 0.5)
        looping = [i for i, r in enumerate(records) if repeated_share(r.text) > cutoff]
        return Measurement(
            ratio(len(looping), len(records)), looping, f"{len(looping)} of {len(records)} completions loop"
        )


@dataclass(frozen=True)
class EchoRatio:
    """Mean turns (tool calls; completion tokens for single-turn domains) of failed
    rollouts over those of the rest: the echo trap spends effort without progress."""

    name: str = "echo_ratio"
    version: int = 1
    layer: Layer = "behaviour"

    def measure(self, data: DiagnosisInput, params: Mapping[str, float]) -> Measurement:
        view = data.evidence
        multi_turn = any(r.tool_calls for r in view.records)
        effort = [float(len(r.tool_calls) if multi_turn else r.completion_tokens) for r in view.records]
        failed = [i for i, c in enumerate(view.correct) if c == 0]
        passed = [i for i, c in enumerate(view.correct) if c > 0]
        if not failed or not passed:
            return Measurement(None, message="needs both failed and successful rollouts")
        f, p = mean([effort[i] for i in failed]), mean([effort[i] for i in passed])
        if p <= 0:
            return Measurement(None, message="successful rollouts take no effort to compare with")
        unit = "turns" if multi_turn else "tokens"
        longest = sorted(failed, key=lambda i: -effort[i])
        return Measurement(f / p, longest, f"failed rollouts take {f:.1f} {unit}, the rest {p:.1f}")


@dataclass(frozen=True)
class DiversityDrop:
    """Points lost in the share of distinct completions per group, earlier to later steps
    (exploration collapse; evidence v1 has no log-probs, so diversity stands in)."""

    name: str = "diversity_drop"
    version: int = 1
    layer: Layer = "behaviour"

    def measure(self, data: DiagnosisInput, params: Mapping[str, float]) -> Measurement:
        view = data.evidence
        halves = view.halves()
        if halves is None:
            return Measurement(None, message="one step: no drift to measure")
        early, late = (_distinct_share(view, set(h)) for h in halves)
        value = early - late
        return Measurement(value, message=f"distinct completions per group {early:.0%} -> {late:.0%}")


def _distinct_share(view, members: set[int]) -> float:  # type: ignore[no-untyped-def]
    shares = []
    for idx in view.groups.values():
        inside = [i for i in idx if i in members]
        if inside:
            shares.append(len({view.records[i].text for i in inside}) / len(inside))
    return mean(shares)


@dataclass(frozen=True)
class RewardHacking:
    """A shaped component rising while correctness stays flat or falls.

    Value: the largest (rise of a weighted shaped component's mean) minus (rise of the
    correctness mean, when positive), earlier to later steps, if correctness rose by at
    most `flat`. Points at later rollouts that earned the shaped reward while wrong.
    """

    name: str = "reward_hacking"
    version: int = 1
    layer: Layer = "behaviour"

    def measure(self, data: DiagnosisInput, params: Mapping[str, float]) -> Measurement:
        view = data.evidence
        truth = view.correctness_component
        shaped = sorted(c for c, w in data.reward_weights.items() if w != 0 and c != truth and c in view.components)
        if not shaped or truth not in view.components:
            return Measurement(None, message="no weighted shaped component next to correctness")
        halves = view.halves()
        if halves is None:
            return Measurement(None, message="one step: no trend to measure")
        early, late = halves
        correct = view.correct
        truth_rise = mean([correct[i] for i in late]) - mean([correct[i] for i in early])
        if truth_rise > params.get("flat", 0.02):
            return Measurement(0.0, message=f"correctness rose {truth_rise:+.3f}: shaped gains are earned")
        worst, worst_name, examples = -math.inf, "", []
        for component in shaped:
            values = view.component(component)
            rise = mean([values[i] for i in late]) - mean([values[i] for i in early])
            gap = rise - max(truth_rise, 0.0)
            if gap > worst:
                wrong = [i for i in late if values[i] > 0 and correct[i] == 0]
                worst, worst_name, examples = gap, component, wrong
        return Measurement(
            worst, examples,
            f"{worst_name} rose {worst + max(truth_rise, 0.0):+.3f} while {truth} moved {truth_rise:+.3f}; "
            f"{len(examples)} later rollouts earned {worst_name} with a wrong answer",
        )  # fmt: skip
