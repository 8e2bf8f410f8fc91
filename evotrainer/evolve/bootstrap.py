"""Paired bootstrap intervals of a mean gain: how sure a gain is, not only how large.

    low, high = bootstrap_interval([[0.25, 0.0, -0.25, 0.5]], confidence=0.95, samples=2000)

The gate and `evotrainer compare` both ask whether a policy beats another beyond the
noise of which problems (and which seeds) happened to be drawn. Gains are per problem,
paired (the same problem scored under both), grouped by seed: a resample draws seeds with
replacement, then problems with replacement within each drawn seed, so the interval
covers both sources of noise. With one group it is the plain paired bootstrap over
problems. The generator is seeded from the data, so the same gains give the same interval
everywhere (a replayed decision reads the same).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence


def bootstrap_interval(groups: Sequence[Sequence[float]], confidence: float, samples: int) -> tuple[float, float]:
    """The percentile interval of the mean gain at `confidence` (two-sided)."""
    import numpy as np

    arrays = [np.asarray(g, dtype=float) for g in groups if len(g)]
    if not arrays:
        raise ValueError("no gains to bootstrap")
    digest = hashlib.sha256(json.dumps([a.round(12).tolist() for a in arrays]).encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "big"))
    means = np.empty(samples)
    for i in range(samples):
        picked = rng.integers(len(arrays), size=len(arrays)) if len(arrays) > 1 else np.zeros(1, dtype=int)
        draws = [arrays[j][rng.integers(len(arrays[j]), size=len(arrays[j]))] for j in picked]
        means[i] = float(np.mean(np.concatenate(draws)))
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(low), float(high)
