"""Replay with tolerances: recorded figures compared within a margin where the machine that
recorded them is not bit-reproducible with this one.

On CPU, with the same packages, thread count and kernels, replay is exact: every output
hash for hash. A GPU (nondeterministic atomics, vLLM's batching) or a CPU whose ATen kernels
are another instruction-set level (AVX512, AVX2, DEFAULT round sums differently) cannot give
the same bytes, so there replay compares what can be compared:

- numbers whose metric has a tolerance: |recorded - now| <= eps (absolute);
- content hashes (`*_sha256`, `evidence`) and names made of them (a cache ref such as
  `policy/tiny/math-<key>`, whose key names the kernels): not compared (other bytes are
  expected), counted;
- everything else (other numbers, strings, list lengths, keys): exactly.

A metric is a payload field's dotted path without list indices (`avg_at_k`,
`component_means.correct`, `step_metrics.loss`, `summary.dead_group_ratio`). Tolerances come
from the recorded run's environment fingerprint (`replay_tolerances`, defaults per device,
`training.environment.replay_tolerances`) and from `evotrainer replay REF --tolerance METRIC=EPS`, which
wins; METRIC may be an fnmatch pattern (`step_metrics.*`, `*`). Between machines whose
fingerprints match on every key that shapes the bytes (`REPRODUCIBILITY_KEYS`), replay
stays exact whatever tolerances are given.

    tol = parse_tolerances(["avg_at_k=0.02"])
    compare_within({"avg_at_k": 0.61}, {"avg_at_k": 0.60}, tol)
    # Comparison(difference=None, deviations={'avg_at_k': 0.01...}, hashes_differing=0)
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from evotrainer.errors import UsageError

REPRODUCIBILITY_KEYS = (
    "machine", "device", "device_name", "packages", "threads", "deterministic_algorithms",
    "cudnn_deterministic", "cudnn_benchmark", "float32_matmul_precision", "cpu_capability", "cpu_model",
)  # fmt: skip
"""Fingerprint keys that change the bytes a computation gives (the rest, such as the
platform string or the python patch version, name the host but not the arithmetic)."""

_HASH_FIELDS = ("evidence",)
_HEX = re.compile(r"[0-9a-f]{16,}")
"""A run of hex digits this long in a string is a hash (or a key cut from one)."""

class ToleranceError(UsageError):
    """A --tolerance that is not METRIC=EPS with EPS a non-negative number."""


@dataclass(frozen=True)
class Tolerances:
    """Absolute tolerances by metric pattern; an exact name beats a pattern, a longer
    pattern a shorter one."""

    by_metric: Mapping[str, float] = field(default_factory=dict)

    def for_metric(self, metric: str) -> float | None:
        if metric in self.by_metric:
            return self.by_metric[metric]
        matching = [p for p in self.by_metric if fnmatch.fnmatchcase(metric, p)]
        return self.by_metric[max(matching, key=len)] if matching else None

    def over(self, base: Mapping[str, float] | None) -> Tolerances:
        """These tolerances on top of `base` (a recorded run's defaults)."""
        return Tolerances({**(base or {}), **self.by_metric})


def parse_tolerances(specs: Iterable[str]) -> Tolerances:
    """`["avg_at_k=0.02", "step_metrics.*=0.1"]` -> Tolerances."""
    found: dict[str, float] = {}
    for spec in specs:
        metric, sep, text = spec.partition("=")
        try:
            eps = float(text)
        except ValueError:
            eps = math.nan
        if not sep or not metric.strip() or not math.isfinite(eps) or eps < 0:
            raise ToleranceError(f"--tolerance {spec!r}: expected METRIC=EPS with EPS a number >= 0, "
                                 "e.g. avg_at_k=0.02 or 'step_metrics.*=0.1'")
        found[metric.strip()] = eps
    return Tolerances(found)


def reproducible(recorded: Mapping[str, Any] | None, now: Mapping[str, Any] | None) -> str | None:
    """None when replay here must give the recorded bytes; else why not, in a line."""
    if recorded is None or now is None:
        return None  # nothing recorded to compare with: judged exactly, as before tolerances
    for side, env in (("recorded", recorded), ("now", now)):
        if env.get("device", "cpu") != "cpu":
            return f"{side} on {env.get('device')} ({env.get('device_name')}), not bit-reproducible"
    for key in REPRODUCIBILITY_KEYS:
        if recorded.get(key) != now.get(key):
            return f"{key} {_short(recorded.get(key))} recorded, {_short(now.get(key))} now"
    return None


@dataclass
class Comparison:
    difference: str | None = None
    """The first thing beyond its tolerance (or any non-numeric difference), in a line."""
    deviations: dict[str, float] = field(default_factory=dict)
    """The largest |recorded - now| per metric that was compared within a tolerance."""
    hashes_differing: int = 0
    """Content hashes that differ (not compared: other bytes are expected)."""


def compare_within(recorded: Any, now: Any, tolerances: Tolerances, comparison: Comparison | None = None,
                   path: str = "", metric: str = "") -> Comparison:
    """Compare two JSON payloads under `tolerances`; stops at the first difference."""
    found = comparison if comparison is not None else Comparison()
    if found.difference is not None:
        return found
    key = metric.rsplit(".", 1)[-1]
    if metric and (key.endswith("sha256") or key in _HASH_FIELDS):
        found.hashes_differing += _count_differing(recorded, now)
        return found
    if isinstance(recorded, dict) and isinstance(now, dict):
        for name in sorted(set(recorded) | set(now)):
            if name not in recorded or name not in now:
                found.difference = f"{path}{name}: {'only now' if name not in recorded else 'only recorded'}"
                return found
            child = f"{metric}.{name}" if metric else str(name)
            compare_within(recorded[name], now[name], tolerances, found, f"{path}{name}.", child)
        return found
    if isinstance(recorded, list) and isinstance(now, list) and len(recorded) == len(now):
        for i, (a, b) in enumerate(zip(recorded, now, strict=True)):
            compare_within(a, b, tolerances, found, f"{path}{i}.", metric)
        return found
    where = path.rstrip(".") or "value"
    eps = tolerances.for_metric(metric) if _number(recorded) and _number(now) else None
    if eps is not None:
        deviation = 0.0 if recorded == now else abs(float(recorded) - float(now))  # inf == inf
        found.deviations[metric] = max(found.deviations.get(metric, 0.0), deviation)
        if not deviation <= eps:  # also a NaN on one side
            found.difference = (f"{where}: {_short(recorded)} recorded, {_short(now)} now "
                                f"(deviation {deviation:.4g} > tolerance {eps:g} for {metric})")
    elif isinstance(recorded, str) and isinstance(now, str) and _HEX.sub("#", recorded) == _HEX.sub("#", now):
        found.hashes_differing += int(recorded != now)
    elif recorded != now:
        found.difference = f"{where}: {_short(recorded)} recorded, {_short(now)} now"
    return found


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _count_differing(recorded: Any, now: Any) -> int:
    if isinstance(recorded, list) and isinstance(now, list):
        return sum(a != b for a, b in zip(recorded, now, strict=False)) + abs(len(recorded) - len(now))
    return int(recorded != now)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
