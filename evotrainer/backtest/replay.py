"""Backtests of single-field interventions on stored evidence, before any training.

Each kind answers the question METHOD.md's authors asked of their cached rollouts:
- reward (`rewards.*`): re-score every rollout from its stored components under the new
  weights: dead groups rescued or killed, and reward-ordering violations introduced (a
  less correct completion now scoring above a more correct one in its group).
- length (`grpo.max_completion_length`, `filters.mask_truncated_completions`): the
  completions a new budget or mask would cut, and how many of them were correct.
- filter (`filters.drop_zero_variance_groups`, `filters.min_group_std`): the share of
  rollouts that would still reach the loss and carry a gradient.
A component the evidence lacks can be scored by an optional `score_missing` callback
(the domain re-scoring a stored completion); otherwise it is a clear error.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from evotrainer.errors import UsageError
from evotrainer.evidence import RolloutRecord, is_dead_group
from evotrainer.harness.intervention import FILTER_FIELDS, LENGTH_FIELDS, REWARD_PREFIX
from evotrainer.harness.spec import HarnessSpec

Figures = dict[str, Any]
ScoreMissing = Callable[[RolloutRecord, str], float]


class NotBacktestableError(UsageError):
    """No replay on stored evidence can say anything about this field."""


def backtest_kind(field: str) -> str:
    if field.startswith(REWARD_PREFIX):
        return "reward"
    if field in LENGTH_FIELDS:
        return "length"
    if field in FILTER_FIELDS:
        return "filter"
    raise NotBacktestableError(
        f"no backtest can replay a change to {field} on stored evidence; backtestable fields: "
        f"rewards.*, {', '.join(LENGTH_FIELDS + FILTER_FIELDS)}. Diagnose further or train it under a gate"
    )


def _groups(records: Sequence[RolloutRecord]) -> dict[int, list[int]]:
    groups: dict[int, list[int]] = {}
    for i, r in enumerate(records):
        groups.setdefault(r.group, []).append(i)
    return groups


def rescore(
    records: Sequence[RolloutRecord], weights: Mapping[str, float], score_missing: ScoreMissing | None = None
) -> list[float]:
    """The reward each rollout would have had under `weights`, summed as TRL sums reward
    functions: an unscorable (NaN) component counts 0, and a rollout with no scorable
    component is itself unscored (NaN), which the dead-group test then leaves out."""
    items = [(c, w) for c, w in sorted(weights.items()) if w != 0]
    out = []
    for r in records:
        total, scored = 0.0, not items
        for c, w in items:
            v = r.rewards.get(c)
            if v is None:
                if score_missing is None:
                    stored = ", ".join(sorted(r.rewards))
                    raise UsageError(f"the evidence has no {c!r} reward component to re-score; stored components: "
                                     f"{stored}. Backtest with the domain to score it")  # fmt: skip
                v = score_missing(r, c)
            if not math.isnan(v):
                total += w * v
                scored = True
        out.append(total if scored else math.nan)
    return out


def _violations(idx: list[int], reward: Sequence[float], truth: Sequence[float]) -> set[tuple[int, int]]:
    """Pairs (better, worse) by correctness where the worse one scores strictly higher."""
    out = set()
    for a in idx:
        for b in idx:
            if truth[a] > truth[b] and reward[a] < reward[b] - 1e-12:
                out.add((a, b))
    return out


def reward_backtest(records: Sequence[RolloutRecord], base: HarnessSpec, candidate: HarnessSpec,
                    score_missing: ScoreMissing | None = None) -> Figures:  # fmt: skip
    min_std = candidate.filters.min_group_std
    truth_name = candidate.rewards.correctness_component
    before = rescore(records, base.rewards.weights, score_missing)
    after = rescore(records, candidate.rewards.weights, score_missing)
    truth = [r.rewards.get(truth_name, math.nan) for r in records]
    truth = [0.0 if v is None or math.isnan(v) else v for v in truth]
    groups = _groups(records)
    dead_before = {g for g, idx in groups.items() if is_dead_group([before[i] for i in idx], min_std)}
    dead_after = {g for g, idx in groups.items() if is_dead_group([after[i] for i in idx], min_std)}
    v_before: set[tuple[int, int]] = set()
    v_after: set[tuple[int, int]] = set()
    for idx in groups.values():
        v_before |= _violations(idx, before, truth)
        v_after |= _violations(idx, after, truth)
    paid_before = {i for i, t in enumerate(truth) if t == 0 and before[i] > 1e-12}
    paid_after = {i for i, t in enumerate(truth) if t == 0 and after[i] > 1e-12}
    n = len(groups) or 1
    return {
        "rollouts": len(records), "groups": len(groups),
        "dead_groups_before": len(dead_before), "dead_groups_after": len(dead_after),
        "dead_groups_rescued": len(dead_before - dead_after), "dead_groups_killed": len(dead_after - dead_before),
        "dead_group_ratio_before": len(dead_before) / n, "dead_group_ratio_after": len(dead_after) / n,
        "effective_data_fraction_before": 1 - len(dead_before) / n,
        "effective_data_fraction_after": 1 - len(dead_after) / n,
        "effective_data_fraction": 1 - len(dead_after) / n, "dead_group_ratio": len(dead_after) / n,
        "ordering_violations_before": len(v_before), "ordering_violations": len(v_after),
        "ordering_violations_introduced": len(v_after - v_before),
        "ordering_violations_removed": len(v_before - v_after),
        # What a gamed bonus does, rollout by rollout: pay for a wrong answer.
        "wrong_rewarded_before": len(paid_before), "wrong_rewarded": len(paid_after),
        "wrong_rewarded_removed": len(paid_before - paid_after),
        "rescued_groups": sorted(dead_before - dead_after)[:20],
    }  # fmt: skip


def length_backtest(records: Sequence[RolloutRecord], base: HarnessSpec, candidate: HarnessSpec) -> Figures:
    truth_name = candidate.rewards.correctness_component
    budget = candidate.grpo.max_completion_length
    masked = candidate.filters.mask_truncated_completions
    # A rollout is lost to the loss if the new budget cuts it, or the mask drops a cut one.
    cut = [i for i, r in enumerate(records)
           if r.completion_tokens > budget or (masked and (r.truncated or r.completion_tokens >= budget))]  # fmt: skip
    correct = [i for i, r in enumerate(records) if (r.rewards.get(truth_name) or 0) > 0]
    correct_cut = sorted(set(cut) & set(correct))
    return {
        "rollouts": len(records), "budget": budget, "mask_truncated": masked,
        "rollouts_cut": len(cut), "cut_fraction": len(cut) / len(records) if records else 0.0,
        "correct_rollouts": len(correct), "correct_cut": len(correct_cut),
        "correct_cut_fraction": len(correct_cut) / len(correct) if correct else 0.0,
        "correct_cut_examples": correct_cut[:20],
    }  # fmt: skip


def filter_backtest(records: Sequence[RolloutRecord], base: HarnessSpec, candidate: HarnessSpec) -> Figures:
    def shares(spec: HarnessSpec) -> tuple[float, float]:
        groups = _groups(records)
        kept = useful = 0
        for idx in groups.values():
            dead = is_dead_group([records[i].reward for i in idx], spec.filters.min_group_std)
            if spec.filters.drop_zero_variance_groups and dead:
                continue
            kept += len(idx)
            useful += 0 if dead else len(idx)
        total = len(records) or 1
        return kept / total, useful / total

    kept_before, useful_before = shares(base)
    kept_after, useful_after = shares(candidate)
    return {
        "rollouts": len(records), "kept_fraction_before": kept_before, "kept_fraction": kept_after,
        "effective_data_fraction_before": useful_before, "effective_data_fraction": useful_after,
    }  # fmt: skip


def run_backtest(kind: str, records: Sequence[RolloutRecord], base: HarnessSpec, candidate: HarnessSpec,
                 score_missing: ScoreMissing | None = None) -> Figures:  # fmt: skip
    if kind == "reward":
        return reward_backtest(records, base, candidate, score_missing)
    if kind == "length":
        return length_backtest(records, base, candidate)
    return filter_backtest(records, base, candidate)
