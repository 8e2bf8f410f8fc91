"""Deterministic train/eval partitioning shared by every domain.

A problem belongs to eval when a hash of its canonical key falls in the eval share, so
the two splits never overlap whatever the seed, and a problem keeps its split when
other problems are added.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from typing import TypeVar

from evotrainer.domains.base import Split

T = TypeVar("T")
EVAL_SHARE = 0.2


def split_of(key: str, eval_share: float = EVAL_SHARE) -> Split:
    digest = hashlib.sha256(key.encode()).digest()
    return "eval" if int.from_bytes(digest[:8], "big") / 2**64 < eval_share else "train"


def rng_for(*parts: object) -> random.Random:
    """A random generator seeded from a stable hash of `parts` (not Python's hash())."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def take_generated(
    split: Split, n: int, generate: Callable[[random.Random], T], key: Callable[[T], str], seed: int
) -> list[T]:
    """The first `n` distinct generated items of `split`; repeats only once the space is exhausted."""
    rng = rng_for("generate", seed)
    out: list[T] = []
    seen: set[str] = set()
    attempts = 0
    while len(out) < n:
        item = generate(rng)
        k = key(item)
        attempts += 1
        if split_of(k) != split:
            continue
        if k in seen and attempts < 200 * (n + 10):
            continue
        seen.add(k)
        out.append(item)
    return out


def take_fixed(split: Split, n: int, items: Sequence[T], key: Callable[[T], str], seed: int) -> list[T]:
    """Up to `n` items of `split` from a fixed pool, in a seed-determined order."""
    pool = [item for item in items if split_of(key(item)) == split]
    rng_for("shuffle", seed).shuffle(pool)
    return pool[:n]
