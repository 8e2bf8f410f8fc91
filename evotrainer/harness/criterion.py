"""Success criteria: falsifiable, machine-checkable statements over named figures.

A criterion is clauses `METRIC OP NUMBER` joined by `and`, e.g.
`dead_groups_rescued >= 2 and ordering_violations_introduced == 0`. An intervention's
criterion may name backtest figures (checked before training) and post-training metrics
(`avg_at_k_gain`, checked by verification); each checker evaluates the clauses it has
figures for and says which ones it could not.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from evotrainer.errors import UsageError

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt, "<": operator.lt,
}  # fmt: skip
_CLAUSE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(>=|<=|==|!=|>|<)\s*(-?(?:\d+\.?\d*|\.\d+)(?:[eE]-?\d+)?)\s*$")


class InvalidCriterionError(UsageError):
    """A success criterion that cannot be checked by a machine."""


@dataclass(frozen=True)
class Clause:
    metric: str
    op: str
    threshold: float

    def holds(self, value: float) -> bool:
        return not math.isnan(value) and _OPS[self.op](value, self.threshold)

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.threshold:g}"


@dataclass(frozen=True)
class Verdict:
    """Which clauses held, failed, or could not be checked with the figures at hand."""

    passed: bool
    held: tuple[str, ...]
    failed: tuple[str, ...]
    unchecked: tuple[str, ...]


def parse_criterion(text: str) -> tuple[Clause, ...]:
    """The clauses of a criterion; InvalidCriterionError says what a clause should look like."""
    clauses = []
    for part in re.split(r"\s+and\s+", text.strip()):
        match = _CLAUSE.match(part)
        if not match:
            raise InvalidCriterionError(
                f"cannot check success criterion clause {part.strip()!r}: write METRIC OP NUMBER "
                "(OP one of >= <= == != > <), clauses joined by 'and', e.g. 'dead_groups_rescued >= 1'"
            )
        clauses.append(Clause(match[1], match[2], float(match[3])))
    return tuple(clauses)


def check_criterion(text: str, figures: Mapping[str, object]) -> Verdict:
    """Evaluate the clauses whose metric is a number in `figures`. It passes only when at
    least one clause was checked and every checked clause holds."""
    held, failed, unchecked = [], [], []
    for clause in parse_criterion(text):
        value = figures.get(clause.metric)
        if isinstance(value, bool) or not isinstance(value, int | float):
            unchecked.append(str(clause))
        elif clause.holds(float(value)):
            held.append(str(clause))
        else:
            failed.append(str(clause))
    return Verdict(bool(held) and not failed, tuple(held), tuple(failed), tuple(unchecked))
