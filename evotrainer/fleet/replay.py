"""Computation replay: run the tasks a branch's history records again, and check that they
give the same outputs, hash for hash.

    for replayed in replay_branch(store, BranchRef("demo", "lr-up")):
        replayed.difference        # None: the same events again

Every completed train, evaluate, diagnose and backtest task in the branch's effective
history (the inherited prefix included, oldest first) runs again with its recorded
inputs, through the same plain functions the workers run, and what it produces is
compared with what it recorded (the events its request caused; a keyed event whose append
kept one recorded earlier is not the task's to check). Train and evaluate read only their
inputs and the artifact store; diagnose and backtest read the branch as it stood when they
ran (just before their results were appended). Each produced payload is validated and encoded as an
append would, then compared field by field, leaving out the time it took
(`wall_seconds`, `cpu_seconds`, `gpu_seconds`) and the environment fingerprint: a different environment is reported,
not failed; on CPU everything else must match exactly. Where the recorded task's machine is
not bit-reproducible with this one (a GPU, CPU kernels of another level: tolerance.py),
its figures are compared within tolerances instead, and the largest deviation per metric
is reported.

A diagnosis that `evotrainer diagnose` recorded (no task: its command's key) is computed
again the same way, on the branch as it stood just before it.

Nothing is appended. Artifacts are content-addressed, so an identical replay stores
nothing new (a diverging one leaves its outputs in the artifact store).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from evotrainer.errors import EvotrainerError
from evotrainer.fleet.tolerance import Comparison, Tolerances, compare_within, reproducible
from evotrainer.lineage.provenance import RESULT_KINDS, command_key
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, NewEvent, StoredEvent
from evotrainer.store.batch import prepare

REPLAYABLE = ("train", "evaluate", "diagnose", "backtest")
NOT_COMPARED = ("wall_seconds", "cpu_seconds", "gpu_seconds", "environment")
_HASHES = ("policy_sha256", "evidence_sha256", "results_sha256", "evidence")


@dataclass(frozen=True)
class ReplayedTask:
    request: StoredEvent
    difference: str | None
    """The first field that differs, said in a line; None when every output is the same."""
    environment_changed: bool
    outputs: dict[str, str]
    """The content hashes it produced, by field (for the report)."""
    not_reproducible: str | None = None
    """Why the recorded machine is not bit-reproducible with this one (its figures were then
    compared within tolerances); None when compared exactly."""
    deviations: dict[str, float] = field(default_factory=dict)
    """Largest |recorded - now| per metric compared within a tolerance."""
    hashes_differing: int = 0

    @property
    def kind(self) -> str:
        if self.request.type != "TaskRequested":
            return RESULT_KINDS[self.request.type]  # a result its command recorded
        return str(self.request.payload["kind"])

    @property
    def task_id(self) -> str:
        if self.request.type != "TaskRequested":
            return "(recorded by its command)"
        return str(self.request.payload["task_id"])


@dataclass(frozen=True)
class RecordedTask:
    request: StoredEvent
    outcome: StoredEvent
    """Its TaskCompleted."""
    caused: list[StoredEvent]
    """The domain events appended with its outcome (its request is their cause)."""
    recorded_keys: frozenset[str]
    """The idempotency keys in the history: a keyed event the task produced may have been
    recorded earlier (by another task or a command), in which case its append kept that
    one and wrote nothing."""

    @property
    def ran_at_seq(self) -> int:
        """The branch as the task saw it: everything before its results were appended."""
        return min(e.seq for e in [*self.caused, self.outcome]) - 1


def recorded_tasks(history: Sequence[StoredEvent]) -> list[RecordedTask]:
    """Each completed replayable task of a branch history, oldest first."""
    outcomes = {e.causation_id: e for e in history if e.type == "TaskCompleted"}
    caused: dict[str, list[StoredEvent]] = {}
    for event in history:
        if event.causation_id and event.type not in ("TaskCompleted", "TaskFailed"):
            caused.setdefault(event.causation_id, []).append(event)
    keys = frozenset(e.idempotency_key for e in history if e.idempotency_key)
    return [RecordedTask(e, outcomes[e.event_id], caused.get(e.event_id, []), keys) for e in history
            if e.type == "TaskRequested" and e.payload["kind"] in REPLAYABLE and e.event_id in outcomes]  # fmt: skip


class CannotReplayError(EvotrainerError):
    """A recorded task cannot run again here (what it needs is missing)."""


def commanded_diagnoses(history: Sequence[StoredEvent]) -> list[StoredEvent]:
    """The diagnoses `evotrainer diagnose` recorded (no cause, the command's key), oldest first."""
    return [e for e in history if e.type == "DiagnosisRecorded" and e.causation_id is None
            and e.idempotency_key == command_key(e)]  # fmt: skip


def replay_branch(store: EventStore, ref: BranchRef, tolerances: Tolerances | None = None) -> Iterator[ReplayedTask]:
    """Replay the branch's recorded tasks, and the diagnoses its command recorded, in the
    order they were recorded (a generator: stop at a difference). `tolerances` (over each
    recorded run's own defaults) apply only where its machine is not bit-reproducible here."""
    history = store.read_branch(ref)
    work: list[RecordedTask | StoredEvent] = [*recorded_tasks(history), *commanded_diagnoses(history)]
    work.sort(key=lambda w: (w.request if isinstance(w, RecordedTask) else w).global_position)
    for item in work:
        r = item.request if isinstance(item, RecordedTask) else item
        try:
            yield (replay_task(store, item, tolerances) if isinstance(item, RecordedTask)
                   else replay_diagnosis(store, item))
        except (EvotrainerError, OSError) as exc:
            what = f"{r.payload['kind']} {r.payload['task_id']}" if isinstance(item, RecordedTask) else r.type
            raise CannotReplayError(f"cannot replay {r.experiment}/{r.branch}@{r.seq} {what}: {exc}") from exc


def replay_diagnosis(store: EventStore, recorded: StoredEvent) -> ReplayedTask:
    """Diagnose again what `evotrainer diagnose` diagnosed: the same evidence, on the branch
    as it stood just before the diagnosis was appended."""
    from evotrainer.diagnostics.task import diagnose_task

    as_it_ran = f"{recorded.experiment}/{recorded.branch}@{recorded.seq - 1}"
    news = diagnose_task(store, {"branch": as_it_ran, "evidence": recorded.payload["evidence"]})
    now = next(prepare(n).payload for n in news if n.type == recorded.type)
    difference = first_difference(_compared(recorded.payload), _compared(now))
    where = f"{recorded.type} (seq {recorded.seq}) {difference}" if difference is not None else None
    return ReplayedTask(recorded, where, False, {})


def replay_task(store: EventStore, task: RecordedTask, tolerances: Tolerances | None = None) -> ReplayedTask:
    request = task.request
    # As an append would store them: validated (defaults filled in) and read back from jsonb.
    produced = [(new, prepare(new).payload) for new in recompute(store, request, task.ran_at_seq)]
    recorded_env = next((e.payload["environment"] for e in task.caused if "environment" in e.payload), None)
    now_env = next((now["environment"] for _, now in produced if "environment" in now), None)
    why = reproducible(recorded_env, now_env)
    # The recorded run's own defaults (its fingerprint's), under what the caller asked for.
    within = (tolerances or Tolerances()).over((recorded_env or {}).get("replay_tolerances")) if why else None
    outputs: dict[str, str] = {}
    changed_environment = False
    total = Comparison()
    unmatched = list(task.caused)

    def result(difference: str | None) -> ReplayedTask:
        return ReplayedTask(request, difference, changed_environment, outputs, why, total.deviations,
                            total.hashes_differing)

    for new, now in produced:
        outputs.update({key: str(now[key]) for key in _HASHES if isinstance(now.get(key), str)})
        key = new.idempotency_key
        before = next((e for e in unmatched if e.idempotency_key == key), None) if key else None
        if before is None and key in task.recorded_keys:
            continue  # its append kept an event recorded earlier: this task wrote nothing to check
        before = before or next((e for e in unmatched if e.type == new.type), None)
        if before is None:
            return result(f"it recorded no {new.type}; now it produces one")
        unmatched.remove(before)
        changed_environment |= before.payload.get("environment") != now.get("environment")
        if within is None:
            difference = first_difference(_compared(before.payload), _compared(now))
        else:
            difference = compare_within(_compared(before.payload), _compared(now), within, total).difference
        if difference is not None:
            return result(f"{new.type} (seq {before.seq}) {difference}")
    if unmatched:
        return result(f"it recorded {', '.join(e.type for e in unmatched)} (seq {unmatched[0].seq}) "
                      "that it no longer produces")
    return result(None)


def recompute(store: EventStore, request: StoredEvent, at_seq: int) -> list[NewEvent]:
    """The events the task's function produces now from its recorded inputs; diagnose and
    backtest read the branch as it stood at `at_seq` (when the task ran)."""
    payload = request.payload
    kind, task_id, inputs = payload["kind"], payload["task_id"], dict(payload.get("inputs", {}))
    as_it_ran = f"{request.experiment}/{request.branch}@{at_seq}"
    if kind == "train":
        from evotrainer.training.task import run_training_task

        harness_hash = inputs.pop("harness_hash", None)
        return run_training_task(inputs, key=task_id, harness_hash=harness_hash)
    if kind == "evaluate":
        from evotrainer.training.task import run_evaluation_task

        return run_evaluation_task(inputs, key=task_id)
    if kind == "diagnose":
        from evotrainer.diagnostics.task import diagnose_task

        return diagnose_task(store, {"branch": as_it_ran, **inputs})  # as the worker merges them
    if kind == "backtest":
        from evotrainer.backtest.task import backtest_task

        return backtest_task(store, {"branch": as_it_ran, **inputs})
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
