"""Computation replay: run the tasks a branch's history records again, and check that they
give the same outputs, hash for hash.

    for replayed in replay_branch(store, BranchRef("demo", "lr-up")):
        replayed.difference        # None: the same events again

Every completed train, evaluate, diagnose and backtest task in the branch's effective
history (the inherited prefix included, oldest first) runs again with its recorded
inputs, through the same plain functions the workers run, and what it produces is
compared with what it recorded (the events its request caused). Train and evaluate read
only their inputs and the artifact store; diagnose and backtest read the branch as it
stood when they were requested. Each produced payload is validated and encoded as an
append would, then compared field by field, leaving out the wall-clock time
(`wall_seconds`) and the environment fingerprint: a different environment is reported,
not failed; on CPU everything else must match exactly.

Nothing is appended. Artifacts are content-addressed, so an identical replay stores
nothing new (a diverging one leaves its outputs in the artifact store).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, NewEvent, StoredEvent
from evotrainer.store.batch import prepare

REPLAYABLE = ("train", "evaluate", "diagnose", "backtest")
NOT_COMPARED = ("wall_seconds", "environment")
_HASHES = ("policy_sha256", "evidence_sha256", "results_sha256", "evidence")


@dataclass(frozen=True)
class ReplayedTask:
    request: StoredEvent
    difference: str | None
    """The first field that differs, said in a line; None when every output is the same."""
    environment_changed: bool
    outputs: dict[str, str]
    """The content hashes it produced, by field (for the report)."""

    @property
    def kind(self) -> str:
        return str(self.request.payload["kind"])

    @property
    def task_id(self) -> str:
        return str(self.request.payload["task_id"])


def recorded_tasks(history: Sequence[StoredEvent]) -> list[tuple[StoredEvent, list[StoredEvent]]]:
    """Each completed replayable task's request and the domain events it caused."""
    completed = {e.causation_id for e in history if e.type == "TaskCompleted"}
    caused: dict[str, list[StoredEvent]] = {}
    for event in history:
        if event.causation_id and event.type not in ("TaskCompleted", "TaskFailed"):
            caused.setdefault(event.causation_id, []).append(event)
    return [(e, caused.get(e.event_id, [])) for e in history
            if e.type == "TaskRequested" and e.payload["kind"] in REPLAYABLE and e.event_id in completed]  # fmt: skip


def replay_branch(store: EventStore, ref: BranchRef) -> Iterator[ReplayedTask]:
    """Replay the branch's recorded tasks in order (a generator: stop at a difference)."""
    for request, recorded in recorded_tasks(store.read_branch(ref)):
        yield replay_task(store, request, recorded)


def replay_task(store: EventStore, request: StoredEvent, recorded: list[StoredEvent]) -> ReplayedTask:
    news = recompute(store, request)
    # As an append would store them: validated (defaults filled in) and read back from jsonb.
    produced = [prepare(new).payload for new in news]
    produced_types = [new.type for new in news]
    outputs = {key: str(p[key]) for p in produced for key in _HASHES if isinstance(p.get(key), str)}
    recorded_types = [e.type for e in recorded]
    if recorded_types != produced_types:
        return ReplayedTask(request, f"it recorded {', '.join(recorded_types) or 'nothing'}; now it produces "
                                     f"{', '.join(produced_types) or 'nothing'}", False, outputs)  # fmt: skip
    changed_environment = False
    for before, now, type_ in zip(recorded, produced, produced_types, strict=True):
        changed_environment |= before.payload.get("environment") != now.get("environment")
        difference = first_difference(_compared(before.payload), _compared(now))
        if difference is not None:
            return ReplayedTask(request, f"{type_} (seq {before.seq}) {difference}", changed_environment, outputs)
    return ReplayedTask(request, None, changed_environment, outputs)


def recompute(store: EventStore, request: StoredEvent) -> list[NewEvent]:
    """The events the task's function produces now from its recorded inputs."""
    payload = request.payload
    kind, task_id, inputs = payload["kind"], payload["task_id"], dict(payload.get("inputs", {}))
    # Diagnose and backtest read the branch: as it stood when the task was requested.
    as_requested = f"{request.experiment}/{request.branch}@{request.seq}"
    if kind == "train":
        from evotrainer.training.task import run_training_task

        harness_hash = inputs.pop("harness_hash", None)
        return run_training_task(inputs, key=task_id, harness_hash=harness_hash)
    if kind == "evaluate":
        from evotrainer.training.task import run_evaluation_task

        return run_evaluation_task(inputs, key=task_id)
    if kind == "diagnose":
        from evotrainer.diagnostics.task import diagnose_task

        return diagnose_task(store, {**inputs, "branch": as_requested})
    if kind == "backtest":
        from evotrainer.backtest.task import backtest_task

        return backtest_task(store, {**inputs, "branch": as_requested})
    raise ValueError(f"task kind {kind!r} is not replayable")


def _compared(payload: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in payload.items() if k not in NOT_COMPARED}


def first_difference(recorded: Any, now: Any, path: str = "") -> str | None:
    """`path: A recorded, B now` for the first place two JSON values differ, else None."""
    if isinstance(recorded, dict) and isinstance(now, dict):
        for key in sorted(set(recorded) | set(now)):
            if key not in recorded or key not in now:
                side = "only now" if key not in recorded else "only recorded"
                return f"{path}{key}: {side}"
            found = first_difference(recorded[key], now[key], f"{path}{key}.")
            if found is not None:
                return found
        return None
    if isinstance(recorded, list) and isinstance(now, list) and len(recorded) == len(now):
        for i, (a, b) in enumerate(zip(recorded, now, strict=True)):
            found = first_difference(a, b, f"{path}{i}.")
            if found is not None:
                return found
        return None
    if recorded == now:
        return None
    return f"{path.rstrip('.') or 'value'}: {_short(recorded)} recorded, {_short(now)} now"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
