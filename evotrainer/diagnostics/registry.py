"""Analyzers by name: the built-in ones and those users publish as entry points.

A package adds an analyzer by declaring, in its pyproject.toml,

    [project.entry-points."evotrainer.analyzers"]
    leak_rate = "mypkg.analyzers:LeakRate"

where the object (a class is instantiated without arguments) has `name`, `version`,
`layer` and `measure(data, params)`. It runs once the harness's `diagnostics` names it,
which happens after retro-validation accepts it (revision.py).
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

from evotrainer.diagnostics.base import Analyzer
from evotrainer.diagnostics.behaviour import (
    DiversityDrop,
    EchoRatio,
    FormatFailureRate,
    LengthDrift,
    LengthRewardCorrelation,
    RepetitionRate,
    RewardHacking,
    TruncationRate,
)
from evotrainer.diagnostics.signal import AdvantageHealth, AvgAtK, DeadGroupRatio, RewardDiscreteness, RewardSpread
from evotrainer.diagnostics.tools import (
    EditFailureRate,
    HistoryPeeking,
    SelfTestDrop,
    TestTampering,
    ToolFailureRate,
)
from evotrainer.errors import UsageError

ENTRY_POINT_GROUP = "evotrainer.analyzers"

BUILTIN: tuple[Analyzer, ...] = (
    AvgAtK(), DeadGroupRatio(), RewardSpread(), RewardDiscreteness(), AdvantageHealth(),
    FormatFailureRate(), TruncationRate(), LengthDrift(), LengthRewardCorrelation(), RepetitionRate(),
    EchoRatio(), DiversityDrop(), ToolFailureRate(), EditFailureRate(), SelfTestDrop(), TestTampering(),
    HistoryPeeking(), RewardHacking(),
)  # fmt: skip


class UnknownAnalyzerError(UsageError):
    """The harness names an analyzer that is neither built in nor installed."""


class InvalidAnalyzerError(UsageError):
    """An entry point does not give a usable analyzer."""


def analyzer_entry_points() -> list[EntryPoint]:
    """The installed `evotrainer.analyzers` entry points (a seam tests replace)."""
    return list(entry_points(group=ENTRY_POINT_GROUP))


def available_analyzers() -> dict[str, Analyzer]:
    """Built-in analyzers, then entry points; a plug-in may not shadow a built-in name."""
    found: dict[str, Analyzer] = {a.name: a for a in BUILTIN}
    for ep in analyzer_entry_points():
        loaded = ep.load()
        analyzer = loaded() if isinstance(loaded, type) else loaded
        for attr in ("name", "version", "layer", "measure"):
            if not hasattr(analyzer, attr):
                raise InvalidAnalyzerError(f"entry point {ep.name} ({ep.value}) gives an analyzer without {attr!r}")
        if analyzer.layer not in ("score", "signal", "behaviour"):
            raise InvalidAnalyzerError(f"analyzer {analyzer.name}: layer must be score, signal or behaviour")
        if analyzer.name in found and found[analyzer.name] is not analyzer:
            if any(b.name == analyzer.name for b in BUILTIN):
                raise InvalidAnalyzerError(f"entry point {ep.name} would shadow the built-in analyzer {analyzer.name}")
        found[analyzer.name] = analyzer
    return found


def analyzer(name: str) -> Analyzer:
    known = available_analyzers()
    if name not in known:
        raise UnknownAnalyzerError(f"no analyzer {name!r}; known: {', '.join(sorted(known))}")
    return known[name]
