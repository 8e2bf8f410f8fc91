"""Rollout evidence: one record per sampled completion, serialized as canonical JSONL.

Diagnostics, backtests and replay read this artifact, never the trainer, so its format is
a contract: each line is a JSON object with sorted keys and no whitespace, records ordered
by (step, group, index). Floats are written by Python's shortest round-trip repr, so equal
runs give byte-identical files (and so identical hashes).

Fields of a record (EVIDENCE_VERSION 1):
    step, group, index       optimizer step, global prompt-group number, position in group
    prompt_id                the domain task id
    text                     the completion text
    prompt_tokens, completion_tokens, truncated
    rewards                  {component: value} for every component the domain reports
    reward                   the weighted total GRPO used
    advantage                the advantage TRL computed for it
    kept                     False when a group filter left its group out of the loss
    tool_calls               tool calls of a multi-turn episode ([] for single-turn)
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

EVIDENCE_VERSION = 1


@dataclass(frozen=True)
class RolloutRecord:
    """One completion and everything its score was made of."""

    step: int
    group: int
    index: int
    prompt_id: str
    text: str
    prompt_tokens: int
    completion_tokens: int
    truncated: bool
    rewards: Mapping[str, float]
    reward: float
    advantage: float
    kept: bool = True
    tool_calls: Sequence[Mapping[str, Any]] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["rewards"] = {k: _clean(v) for k, v in sorted(self.rewards.items())}
        data["reward"] = _clean(self.reward)
        data["advantage"] = _clean(self.advantage)
        data["tool_calls"] = [dict(c) for c in self.tool_calls]
        return data


def _clean(value: float) -> float | None:
    """JSON has no NaN: an unscorable value is written as null."""
    value = float(value)
    return None if math.isnan(value) or math.isinf(value) else value


def to_jsonl(records: Iterable[RolloutRecord]) -> bytes:
    """Canonical bytes of the evidence: sorted keys, compact separators, one line each."""
    ordered = sorted(records, key=lambda r: (r.step, r.group, r.index))
    lines = [json.dumps(r.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False) for r in ordered]
    return ("\n".join(lines) + "\n").encode() if lines else b""


def from_jsonl(data: bytes) -> list[RolloutRecord]:
    """Parse evidence written by `to_jsonl` (diagnostics and backtests use this)."""
    out = []
    for line in data.decode().split("\n"):  # not splitlines(): texts may hold U+2028 etc.
        if not line:
            continue
        d = json.loads(line)
        d["rewards"] = {k: (math.nan if v is None else v) for k, v in d["rewards"].items()}
        d["reward"] = math.nan if d["reward"] is None else d["reward"]
        d["advantage"] = math.nan if d["advantage"] is None else d["advantage"]
        d["tool_calls"] = tuple(d.get("tool_calls", ()))
        out.append(RolloutRecord(**d))
    return out


def summarize(records: Sequence[RolloutRecord], min_group_std: float) -> dict[str, float]:
    """Signal-layer numbers a result carries so callers need not reread the artifact."""
    if not records:
        return {"completions": 0, "groups": 0, "dead_group_ratio": 0.0, "mean_reward": 0.0, "truncation_rate": 0.0}
    groups: dict[int, list[float]] = {}
    for r in records:
        groups.setdefault(r.group, []).append(r.reward)
    dead = sum(1 for rewards in groups.values() if is_dead_group(rewards, min_group_std))
    return {
        "completions": len(records),
        "groups": len(groups),
        "dead_group_ratio": dead / len(groups),
        "mean_reward": sum(r.reward for r in records) / len(records),
        "truncation_rate": sum(r.truncated for r in records) / len(records),
        "mean_completion_tokens": sum(r.completion_tokens for r in records) / len(records),
    }


def group_spread(rewards: Sequence[float]) -> float:
    """Population std of a prompt group's rewards: the spread GRPO's advantages come from.

    The NaN rule, the one place it is decided: a reward that is not finite (NaN, or null
    in the JSONL) is an unscored rollout and is left out, as TRL leaves it out of the
    group's mean and std and gives it advantage 0. A group with fewer than two scored
    rewards has no spread (0.0), so it is dead.
    """
    scored = [float(v) for v in rewards if math.isfinite(v)]
    if len(scored) < 2:
        return 0.0
    mean = sum(scored) / len(scored)
    return math.sqrt(max(sum((v - mean) ** 2 for v in scored) / len(scored), 0.0))


def is_dead_group(rewards: Sequence[float], min_std: float) -> bool:
    """A group GRPO learns nothing from: its rewards' spread is below `min_std` (the
    harness's filters.min_group_std). Diagnostics, backtests, the trainer's group filter
    and `summarize` all call a group dead through this one test."""
    return group_spread(rewards) < min_std
