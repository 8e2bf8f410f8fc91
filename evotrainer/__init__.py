"""evotrainer: an event-sourced experiment database and worker fleet for RL training of
language models. The Python API:

    import evotrainer

    db = evotrainer.connect()                         # as the CLI: EVOTRAINER_DATABASE_URL or embedded
    db.experiments().to_pandas()
    db.training_metrics("demo").to_pandas()

Every name below is resolved on first use (a module `__getattr__`): the CLI imports this
package for every command, and a reading command must not pay for the client, pandas,
pydantic or torch. See docs/api.md for the reference.
"""

from __future__ import annotations

# No imports at run time but the few lines of lazy_names.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from evotrainer.client import Client, MissingExtraError, Table, connect
    from evotrainer.client.results import (
        Audit,
        Backtest,
        Branch,
        Comparison,
        Diagnosis,
        Experiment,
        GateDecision,
        Harness,
        HarnessDiff,
        Lineage,
        Promotion,
        Proposal,
        Replay,
        RunResult,
        TaskOutcome,
    )
    from evotrainer.errors import (
        AlreadyExistsError,
        ConcurrencyError,
        DatabaseUnavailableError,
        EvotrainerError,
        ImmutableHistoryError,
        InvalidPayloadError,
        NotFoundError,
        UsageError,
    )
    from evotrainer.lineage.readonly import ReadOnlyViolation
    from evotrainer.refs import BranchRef
    from evotrainer.store import StoredEvent

# Public name -> the module that defines it.
from evotrainer.lazy_names import lazy_names  # noqa: E402 (after the TYPE_CHECKING block)

_WHERE: dict[str, str] = {
    "connect": "evotrainer.client",
    "Client": "evotrainer.client",
    "Table": "evotrainer.client",
    "MissingExtraError": "evotrainer.client",
    **dict.fromkeys(("Audit", "Backtest", "Branch", "Comparison", "Diagnosis", "Experiment", "GateDecision",
                     "Harness", "HarnessDiff", "Lineage", "Promotion", "Proposal", "Replay", "RunResult",
                     "TaskOutcome"),
                    "evotrainer.client.results"),  # fmt: skip
    **dict.fromkeys(("EvotrainerError", "UsageError", "NotFoundError", "AlreadyExistsError", "InvalidPayloadError",
                     "ConcurrencyError", "DatabaseUnavailableError", "ImmutableHistoryError"),
                    "evotrainer.errors"),  # fmt: skip
    "ReadOnlyViolation": "evotrainer.lineage.readonly",
    "BranchRef": "evotrainer.refs",
    "StoredEvent": "evotrainer.store",
}

__all__ = [
    "AlreadyExistsError",
    "Audit",
    "Backtest",
    "Branch",
    "BranchRef",
    "Client",
    "Comparison",
    "ConcurrencyError",
    "DatabaseUnavailableError",
    "Diagnosis",
    "EvotrainerError",
    "Experiment",
    "GateDecision",
    "Harness",
    "HarnessDiff",
    "ImmutableHistoryError",
    "InvalidPayloadError",
    "Lineage",
    "MissingExtraError",
    "NotFoundError",
    "Promotion",
    "Proposal",
    "ReadOnlyViolation",
    "Replay",
    "RunResult",
    "StoredEvent",
    "Table",
    "TaskOutcome",
    "UsageError",
    "connect",
]


__getattr__, __dir__ = lazy_names(__name__, _WHERE)
