"""Score and Signal layers: Avg@k against the best previous version, and GRPO health.

GRPO learns only from differences inside a prompt group: a group whose rewards all
equal gives no gradient ("loss active, nothing learned"), a narrow spread gives a weak
one, and a discrete reward with one dominant value leaves most groups dead.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from evotrainer.diagnostics.base import DiagnosisInput, Layer, Measurement, mean, ratio


@dataclass(frozen=True)
class AvgAtK:
    """Shortfall of the latest Avg@k below the best earlier one (0 when it is the best)."""

    name: str = "avg_at_k"
    version: int = 1
    layer: Layer = "score"

    def measure(self, data: DiagnosisInput, params: Mapping[str, float]) -> Measurement:
        if not data.evaluations:
            return Measurement(None, message="no evaluation recorded on this branch")
        *earlier, latest = data.evaluations
        if not earlier:
            return Measurement(0.0, message=f"Avg@{latest.k} = {latest.avg_at_k:.4f} (first evaluation)")
        best = max(e.avg_at_k for e in earlier)
        shortfall = best - latest.avg_at_k + params.get("min_gain", 0.0)
        return Measurement(
            max(shortfall, 0.0),
            message=f"Avg@{latest.k} = {latest.avg_at_k:.4f}, best previous {best:.4f} "
            f"({latest.avg_at_k - best:+.4f})",
        )


@dataclass(frozen=True)
class DeadGroupRatio:
    """Share of prompt groups whose rewards all equal (std below the harness's min_group_std)."""

    name: str = "dead_group_ratio"
    version: int = 1
    layer: Layer = "signal"

    def measure(self, data: DiagnosisInput, params: Mapping[str, float]) -> Measurement:
        view = data.evidence
        dead = view.dead_groups(data.min_group_std)
        value = ratio(len(dead), len(view.groups))
        examples = [view.groups[g][0] for g in dead]
        return Measurement(value, examples, f"{len(dead)} of {len(view.groups)} groups have no reward variance")


@dataclass(frozen=True)
class RewardSpread:
    """Mean within-group std of the reward (< 0.05: a weak signal)."""

    name: str = "reward_spread"
    version: int = 1
    layer: Layer = "signal"

    def measure(self, data: DiagnosisInput, params: Mapping[str, float]) -> Measurement:
        stds = list(data.evidence.group_std.values())
        if not stds:
            return Measurement(None, message="no groups")
        value = sum(stds) / len(stds)
        return Measurement(value, message=f"mean within-group reward std {value:.4f} over {len(stds)} groups")


@dataclass(frozen=True)
class RewardDiscreteness:
    """Share of rollouts holding the single most common reward value."""

    name: str = "reward_discreteness"
    version: int = 1
    layer: Layer = "signal"

    def measure(self, data: DiagnosisInput, params: Mapping[str, float]) -> Measurement:
        values = [round(r, 6) for r in data.evidence.rewards if not math.isnan(r)]
        if not values:
            return Measurement(None, message="no scored rollouts")
        (top, count), = Counter(values).most_common(1)
        distinct = len(set(values))
        return Measurement(
            count / len(values), message=f"reward {top:g} holds {count} of {len(values)} outcomes ({distinct} distinct)"
        )


@dataclass(frozen=True)
class AdvantageHealth:
    """Share of live groups whose advantages are degenerate: non-finite, all ~0 while the
    rewards differ, or ordered against the rewards (a better completion pushed down)."""

    name: str = "advantage_health"
    version: int = 1
    layer: Layer = "signal"

    def measure(self, data: DiagnosisInput, params: Mapping[str, float]) -> Measurement:
        view = data.evidence
        dead = set(view.dead_groups(data.min_group_std))
        live = [g for g in view.groups if g not in dead]
        if not live:
            return Measurement(None, message="no live groups to check")
        bad, examples = 0, []
        for g in live:
            idx = view.groups[g]
            adv = [view.records[i].advantage for i in idx]
            rew = [view.rewards[i] for i in idx]
            if _degenerate(adv, rew):
                bad += 1
                examples.append(idx[0])
        return Measurement(bad / len(live), examples, f"{bad} of {len(live)} live groups have degenerate advantages")


def _degenerate(adv: list[float], rew: list[float]) -> bool:
    if any(not math.isfinite(a) for a in adv):
        return True
    if max(abs(a) for a in adv) < 1e-9:
        return True
    m = mean(rew)
    # An advantage must have the sign of (reward - group mean) wherever that is clear.
    return any((r - m) * a < 0 for r, a in zip(rew, adv, strict=True) if abs(r - m) > 1e-9 and abs(a) > 1e-9)
