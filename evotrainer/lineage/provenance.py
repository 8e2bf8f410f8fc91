"""Which results the record vouches for: an evaluation, a diagnosis or a backtest counts only
when the work that owns its type produced it.

    history = from_work(store.read_branch(ref))   # without results that nothing computed
    unverifiable(history)                          # those results, for `replay` to name

A result was produced by a task when its cause is a TaskRequested of the kind that computes
it (EvaluationRecorded: evaluate, DiagnosisRecorded: diagnose, BacktestCompleted: backtest)
and it was appended in the transaction that recorded that task's TaskCompleted: the fleet
closes a task and appends its results in one statement (evotrainer.fleet.execute), which
nothing else does. It was produced by a command when it has no cause and carries the
idempotency key that command derives from what it computed (`evotrainer diagnose`,
`evotrainer backtest`; an evaluation is only ever a task's). Anything else, an event
appended by hand (`evotrainer events append`, the store's API) with whatever score, is left
out of what the gate and the controller read, and `replay` names it as unverifiable.

Structure is not truth: whether a produced result is right is replay's question, which
computes every task's results again from its recorded inputs.
"""

from __future__ import annotations

from collections.abc import Sequence

from evotrainer.store import StoredEvent

RESULT_KINDS = {"EvaluationRecorded": "evaluate", "DiagnosisRecorded": "diagnose", "BacktestCompleted": "backtest"}
"""Each result type and the one task kind that computes it."""


def command_key(event: StoredEvent) -> str | None:
    """The idempotency key the command that owns the event's type appends it under (the
    same key its task uses, so a task and the command never record one result twice)."""
    p = event.payload
    if event.type == "DiagnosisRecorded":
        return f"diagnosis:{p.get('evidence')}:{p.get('harness_hash')}"
    if event.type == "BacktestCompleted":
        return f"backtest:{p.get('intervention_id')}:{p.get('evidence')}"
    return None


class Provenance:
    """Who produced each result of one history (a branch's, inherited prefix included)."""

    def __init__(self, history: Sequence[StoredEvent]) -> None:
        self._requests = {e.event_id: e for e in history if e.type == "TaskRequested"}
        self._completed_in: dict[str, set[int]] = {}
        for event in history:
            if event.type == "TaskCompleted" and event.causation_id:
                self._completed_in.setdefault(event.causation_id, set()).add(event.transaction_id)

    def produced_by(self, event: StoredEvent) -> str | None:
        """`task TASK_ID`, `command`, or None when no work produced this result."""
        kind = RESULT_KINDS.get(event.type)
        if kind is None:
            return None
        if event.causation_id is None:
            key = command_key(event)
            return "command" if key is not None and event.idempotency_key == key else None
        request = self._requests.get(event.causation_id)
        if request is None or request.payload.get("kind") != kind:
            return None
        if event.transaction_id not in self._completed_in.get(request.event_id, set()):
            return None  # not appended with the task's outcome: someone else named it as the cause
        return f"task {request.payload.get('task_id')}"

    def vouched(self, event: StoredEvent) -> bool:
        """Whether the event may be read as a result: not a result type, or produced by work."""
        return event.type not in RESULT_KINDS or self.produced_by(event) is not None


def from_work(history: Sequence[StoredEvent]) -> list[StoredEvent]:
    """The history without the results no task or command produced."""
    provenance = Provenance(history)
    return [e for e in history if provenance.vouched(e)]


def unverifiable(history: Sequence[StoredEvent]) -> list[StoredEvent]:
    """The results in the history that no task or command produced, oldest first."""
    provenance = Provenance(history)
    return [e for e in history if not provenance.vouched(e)]
