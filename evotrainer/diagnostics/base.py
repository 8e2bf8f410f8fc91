"""What every analyzer sees and returns, and how a measurement becomes a graded Finding.

An analyzer measures one metric over a `DiagnosisInput` (the rollout evidence, indexed
once as an `EvidenceView`, plus the branch's evaluations) and returns a `Measurement`: a
value (None when the metric does not apply to this evidence), the rollouts that show it,
and a sentence. The harness spec's thresholds, never the analyzer, decide its severity.

A user analyzer is any object with `name`, `version`, `layer` and `measure(data, params)`,
published under the `evotrainer.analyzers` entry-point group (see registry.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal, Protocol

from evotrainer.events import Finding
from evotrainer.evidence import RolloutRecord, group_spread
from evotrainer.harness.spec import AnalyzerSettings

Layer = Literal["score", "signal", "behaviour"]
MAX_EXAMPLES = 20
"""Rollouts a finding points at: enough to read, small enough for an event."""


@dataclass(frozen=True)
class Measurement:
    value: float | None
    rollouts: Sequence[int] = ()
    """Positions in the evidence (0-based line numbers of the JSONL artifact)."""
    message: str = ""


class Analyzer(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def version(self) -> int: ...
    @property
    def layer(self) -> Layer: ...

    def measure(self, data: DiagnosisInput, params: Mapping[str, float]) -> Measurement: ...


@dataclass(frozen=True)
class Evaluation:
    """One EvaluationRecorded, as the Score layer needs it."""

    policy: str
    avg_at_k: float
    k: int
    seq: int


class EvidenceView:
    """Rollout evidence indexed once for every analyzer: groups, steps, reward columns."""

    def __init__(self, records: Sequence[RolloutRecord], correctness: str = "correctness") -> None:
        self.records = records
        self.correctness_component = correctness
        self.rewards = [_finite(r.reward) for r in records]
        groups: dict[int, list[int]] = {}
        steps: dict[int, list[int]] = {}
        for i, r in enumerate(records):
            groups.setdefault(r.group, []).append(i)
            steps.setdefault(r.step, []).append(i)
        self.groups = groups
        self.steps = dict(sorted(steps.items()))

    def __len__(self) -> int:
        return len(self.records)

    @cached_property
    def components(self) -> frozenset[str]:
        return frozenset(k for r in self.records for k in r.rewards)

    def component(self, name: str) -> list[float]:
        """One reward component per rollout (NaN where a rollout lacks it)."""
        return [_finite(r.rewards.get(name, math.nan)) for r in self.records]

    @cached_property
    def correct(self) -> list[float]:
        return self.component(self.correctness_component)

    @cached_property
    def group_std(self) -> dict[int, float]:
        return {g: group_spread([self.rewards[i] for i in idx]) for g, idx in self.groups.items()}

    def dead_groups(self, min_std: float) -> list[int]:
        """Groups GRPO learns nothing from: spread below `min_std`, the test of
        evidence.is_dead_group, applied to the spreads computed once above."""
        return [g for g, std in self.group_std.items() if std < min_std]

    def halves(self) -> tuple[list[int], list[int]] | None:
        """Rollouts of the earlier and the later half of the steps (None with one step):
        what 'rising' and 'drifting' are measured between."""
        steps = list(self.steps)
        if len(steps) < 2:
            return None
        cut = len(steps) // 2
        early = [i for s in steps[:cut] for i in self.steps[s]]
        late = [i for s in steps[cut:] for i in self.steps[s]]
        return early, late


@dataclass(frozen=True)
class DiagnosisInput:
    evidence: EvidenceView
    evaluations: Sequence[Evaluation] = ()
    """The branch's evaluations, oldest first; the last one is the version under diagnosis."""
    min_group_std: float = 1e-3
    """From the harness filters: below this a group's rewards count as all equal."""
    reward_weights: Mapping[str, float] = field(default_factory=lambda: {"correctness": 1.0})
    extra: Mapping[str, Any] = field(default_factory=dict)


def grade(value: float | None, settings: AnalyzerSettings) -> Literal["info", "warning", "critical"]:
    """Severity from the spec's thresholds: `above` alerts when value > threshold."""
    if value is None or math.isnan(value):
        return "info"
    worse = (lambda v, t: v > t) if settings.direction == "above" else (lambda v, t: v < t)
    if settings.critical is not None and worse(value, settings.critical):
        return "critical"
    if settings.warning is not None and worse(value, settings.warning):
        return "warning"
    return "info"


def finding(analyzer: Analyzer, settings: AnalyzerSettings, m: Measurement) -> Finding:
    value = None if m.value is None or not math.isfinite(m.value) else float(m.value)
    return Finding(
        analyzer=analyzer.name, analyzer_version=analyzer.version, layer=analyzer.layer, metric=analyzer.name,
        value=value, severity=grade(value, settings), message=m.message,
        rollouts=sorted(set(m.rollouts))[:MAX_EXAMPLES],
    )  # fmt: skip


# -- small numeric pieces shared by analyzers (pure Python: no numpy in the core) ------


def _finite(x: float) -> float:
    return float(x) if x is not None and math.isfinite(x) else math.nan


def mean(values: Sequence[float]) -> float:
    vals = [v for v in values if not math.isnan(v)]
    return sum(vals) / len(vals) if vals else math.nan


def correlation(xs: Sequence[float], ys: Sequence[float]) -> float:
    pairs = [(x, y) for x, y in zip(xs, ys, strict=True) if not (math.isnan(x) or math.isnan(y))]
    if len(pairs) < 3:
        return math.nan
    mx = sum(x for x, _ in pairs) / len(pairs)
    my = sum(y for _, y in pairs) / len(pairs)
    sxy = sum((x - mx) * (y - my) for x, y in pairs)
    sxx = sum((x - mx) ** 2 for x, _ in pairs)
    syy = sum((y - my) ** 2 for _, y in pairs)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else math.nan


def ratio(part: int, whole: int) -> float | None:
    return part / whole if whole else None
