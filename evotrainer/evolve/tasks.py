"""How the controller gets work done: it requests a fleet task and waits for its outcome.

    events = run_task(store, branch, "train", inputs)

The task id is derived from the kind, the branch and the inputs, so asking again for the
same work (a restarted controller) finds the task already requested, or already done,
instead of running it twice. Without a broker the task runs in this process; with one, a
worker runs it and this waits for its TaskCompleted or TaskFailed on the branch.

A task whose attempts ran out (AttemptsExhausted: its workers died, or lost their
connections, every time) says nothing about the work: it is a fault, not a verdict. The
same work is requested again at once under the next generation's id (`-r2`, `-r3`), and
only when every generation was lost does this give up with WorkLostError, which callers
must not record as the work's failure: running the controller again resumes it.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from evotrainer import config
from evotrainer.errors import EvotrainerError
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, StoredEvent

_POLL_S = 0.5


class TaskFailedError(EvotrainerError):
    """A task the controller needs ended in TaskFailed (it is not retried with the same inputs)."""


class TaskTimeoutError(EvotrainerError):
    """No worker finished a task in time."""


class WorkLostError(EvotrainerError):
    """Every generation of a task ran out of attempts without the task itself failing
    (workers killed, connections lost): a fault of the fleet, never a verdict on the work."""


LOST = "AttemptsExhausted"
"""The error class of a TaskFailed recorded because the attempts ran out (fleet.execute)."""


def lost_to_faults(failure: str) -> bool:
    """Whether a recorded failure (a TaskFailedError's message, as an unrunnable verdict
    keeps it) was work whose attempts ran out: earlier versions rejected candidates for
    that, which says nothing about the candidate."""
    return f": {LOST}: " in failure


def task_id(kind: str, branch: BranchRef, inputs: dict[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps([str(branch), inputs], sort_keys=True).encode()).hexdigest()
    return f"{kind}-{digest[:16]}"


MAX_GENERATIONS = 3
"""Generations of the same work one call of run_task requests before it gives up (each
with its own `max_attempts`); running the controller again requests more."""


def _current_generation(store: EventStore, branch: BranchRef, ident: str) -> str:
    """The id to ask under: `ident`, unless that task failed because its attempts ran out
    (its workers died or lost their leases, which says nothing about the work), in which
    case the same work is requested again as `ident-r2`, `-r3`, ... A task that failed by
    raising keeps its id: the same inputs would fail the same way."""
    outcomes = {e.payload.get("task_id"): e for e in store.read_branch(branch) if e.type == "TaskFailed"}
    generation = 1
    while True:
        candidate = ident if generation == 1 else f"{ident}-r{generation}"
        failed = outcomes.get(candidate)
        if failed is None or failed.payload.get("error_class") != LOST:
            return candidate
        generation += 1


def run_task(
    store: EventStore, branch: BranchRef, kind: str, inputs: dict[str, Any], timeout_s: float = 3600.0
) -> list[StoredEvent]:
    """Request the task (once) and return the events it appended to the branch; request
    it again under the next generation's id while its attempts run out (see above)."""
    base = task_id(kind, branch, inputs)
    deadline = time.monotonic() + timeout_s
    for _ in range(MAX_GENERATIONS):
        ident = _current_generation(store, branch, base)
        outcome, produced = _wait_for(store, branch, kind, ident, inputs, deadline, timeout_s)
        p = outcome.payload
        if outcome.type == "TaskCompleted":
            return produced
        if p.get("error_class") != LOST:
            raise TaskFailedError(f"{kind} task {ident} on {branch} failed: {p.get('error_class')}: {p.get('message')}")
    raise WorkLostError(f"{kind} task {ident} on {branch} was lost {MAX_GENERATIONS} times over ({p.get('message')}): "
                        "a fault of the fleet, not of the work; run the command again to request it again")


def _wait_for(
    store: EventStore, branch: BranchRef, kind: str, ident: str, inputs: dict[str, Any], deadline: float,
    timeout_s: float,
) -> tuple[StoredEvent, list[StoredEvent]]:
    """Request the task `ident` (a no-op when it is already requested) and wait for its
    outcome; returns the outcome and everything the task appended."""
    from evotrainer.fleet import request_task, run_in_process

    requested = request_task(store, branch, kind, ident, inputs)
    while True:
        # Everything a task appends names its request as the cause.
        produced = [e for e in store.read_branch(branch, after_seq=requested.seq)
                    if e.causation_id == requested.event_id]  # fmt: skip
        outcome = next((e for e in produced if e.type in ("TaskCompleted", "TaskFailed")), None)
        if outcome is not None:
            return outcome, produced
        if not config.broker_url() and run_in_process(store):
            continue  # ran something: look again
        # A worker has it (or, without a broker, a lease another process holds): wait.
        if time.monotonic() > deadline:
            raise TaskTimeoutError(f"{kind} task {ident} on {branch} did not finish within {timeout_s:g} s: "
                                   "is a worker consuming its queue? (`evotrainer tasks`)")  # fmt: skip
        time.sleep(_POLL_S)
