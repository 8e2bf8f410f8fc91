"""How the controller gets work done: it requests a fleet task and waits for its outcome.

    events = run_task(store, branch, "train", inputs)

The task id is derived from the kind, the branch and the inputs, so asking again for the
same work (a restarted controller) finds the task already requested, or already done,
instead of running it twice. Without a broker the task runs in this process; with one, a
worker runs it and this waits for its TaskCompleted or TaskFailed on the branch.
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


def task_id(kind: str, branch: BranchRef, inputs: dict[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps([str(branch), inputs], sort_keys=True).encode()).hexdigest()
    return f"{kind}-{digest[:16]}"


MAX_GENERATIONS = 3
"""Times the same work is requested afresh after its attempts ran out (see _current_generation)."""


def _current_generation(store: EventStore, branch: BranchRef, ident: str) -> str:
    """The id to ask under: `ident`, unless that task failed because its attempts ran out
    (its workers died or lost their leases, which says nothing about the work), in which
    case the same work is requested again as `ident-r2`, `-r3`. A task that failed by
    raising keeps its id: the same inputs would fail the same way."""
    outcomes = {e.payload.get("task_id"): e for e in store.read_branch(branch) if e.type == "TaskFailed"}
    for generation in range(1, MAX_GENERATIONS + 1):
        candidate = ident if generation == 1 else f"{ident}-r{generation}"
        failed = outcomes.get(candidate)
        if failed is None or failed.payload.get("error_class") != "AttemptsExhausted":
            return candidate
    return candidate


def run_task(
    store: EventStore, branch: BranchRef, kind: str, inputs: dict[str, Any], timeout_s: float = 3600.0
) -> list[StoredEvent]:
    """Request the task (once) and return the events it appended to the branch."""
    from evotrainer.fleet import request_task, run_in_process

    ident = _current_generation(store, branch, task_id(kind, branch, inputs))
    requested = request_task(store, branch, kind, ident, inputs)
    deadline = time.monotonic() + timeout_s
    while True:
        # Everything a task appends names its request as the cause.
        produced = [e for e in store.read_branch(branch, after_seq=requested.seq)
                    if e.causation_id == requested.event_id]  # fmt: skip
        outcome = next((e for e in produced if e.type in ("TaskCompleted", "TaskFailed")), None)
        if outcome is not None:
            break
        if not config.broker_url() and run_in_process(store):
            continue  # ran something: look again
        # A worker has it (or, without a broker, a lease another process holds): wait.
        if time.monotonic() > deadline:
            raise TaskTimeoutError(f"{kind} task {ident} on {branch} did not finish within {timeout_s:g} s: "
                                   "is a worker consuming its queue? (`evotrainer tasks`)")  # fmt: skip
        time.sleep(_POLL_S)
    if outcome.type == "TaskFailed":
        p = outcome.payload
        raise TaskFailedError(f"{kind} task {ident} on {branch} failed: {p.get('error_class')}: {p.get('message')}")
    return produced
