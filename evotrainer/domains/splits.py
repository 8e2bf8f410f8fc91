"""Deterministic train/eval partitioning shared by every domain.

The split rule: a problem belongs to eval when the first 8 bytes of the sha256 of its
canonical key, read as a big-endian fraction of 2**64, fall below EVAL_SHARE (0.2), and to
train otherwise. So the two splits never overlap whatever the seed, and a problem keeps
its split when other problems are added or the file is reordered. The key is the
problem's content for generated domains and math files (the prompt), and its task id for
code and SWE pools. The seed only orders a split: `take_fixed` shuffles a pool's split
with it, `take_generated` draws with it. A file named with `split=all`
(`math:file=PATH,split=all`) skips the rule: every split is the whole file in file order
(`take_all`), for scoring or evaluating a benchmark file whole.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from typing import TypeVar, get_args

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


def _known(split: str) -> None:
    # A split no item hashes to would leave take_generated drawing forever (and take_fixed
    # returning nothing): a caller's typo is an error here, at the one place both pass.
    if split not in get_args(Split):
        raise ValueError(f"split must be one of {list(get_args(Split))}, not {split!r}")


def take_generated(
    split: Split, n: int, generate: Callable[[random.Random], T], key: Callable[[T], str], seed: int
) -> list[T]:
    """The first `n` distinct generated items of `split`; repeats only once the space is exhausted."""
    _known(split)
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
    _known(split)
    pool = [item for item in items if split_of(key(item)) == split]
    rng_for("shuffle", seed).shuffle(pool)
    return pool[:n]


def take_all(n: int, items: Sequence[T]) -> list[T]:
    """The first `n` items of a fixed pool in its own order, whatever the split and seed
    (the split rule is not applied: train and eval are the same items)."""
    return list(items[:n])
