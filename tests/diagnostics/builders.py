"""Hand-built rollout evidence with known answers, shared by diagnostics and backtest tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evotrainer.evidence import RolloutRecord


def record(step: int, group: int, index: int, *, correct: float = 0.0, fmt: float | None = None,
           text: str = "7", tokens: int = 4, truncated: bool = False, advantage: float = 0.0,
           tool_calls: Sequence[dict[str, Any]] = (), weights: dict[str, float] | None = None) -> RolloutRecord:  # fmt: skip
    rewards = {"correctness": correct}
    if fmt is not None:
        rewards["format"] = fmt
    weights = weights or {"correctness": 1.0}
    reward = sum(w * rewards.get(c, 0.0) for c, w in weights.items())
    return RolloutRecord(step, group, index, f"p{group}", text, 5, tokens, truncated, rewards, reward, advantage,
                         True, tuple(tool_calls))  # fmt: skip


def groups_of(outcomes: Sequence[Sequence[float]], step: int = 0, first_group: int = 0) -> list[RolloutRecord]:
    """One group per row of correctness values, advantages computed GRPO-style."""
    out = []
    for g, row in enumerate(outcomes):
        m = sum(row) / len(row)
        for i, c in enumerate(row):
            out.append(record(step, first_group + g, i, correct=c, advantage=c - m, text=f"answer {g} {i} {c}"))
    return out
