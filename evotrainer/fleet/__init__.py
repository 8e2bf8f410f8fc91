"""The worker fleet: a transactional outbox from TaskRequested events to a Celery broker,
thin workers that run registered task functions, leases that survive crashed workers.

    from evotrainer.fleet import TaskSpec, request_task, request_tasks, run_in_process
    request_task(store, BranchRef("demo", "main"), "noop", task_id="t1")
    request_tasks(store, BranchRef("demo", "main"), [TaskSpec("noop", f"n{i}") for i in range(100)])
    run_in_process(store)        # no broker configured: the same task code, in this process

With EVOTRAINER_BROKER_URL set, `evotrainer dispatcher` hands requests to the broker and
`evotrainer worker` runs them (docs/fleet.md).
"""

from __future__ import annotations

from typing import Any

# Submodules are imported on first use: evotrainer.fleet.tables must be importable from
# the migrations' environment without pulling in the store (which would be a cycle).
_EXPORTS = {
    "QUEUES": "evotrainer.fleet.config",
    "FleetConfig": "evotrainer.fleet.config",
    "run_in_process": "evotrainer.fleet.inprocess",
    "TaskRequest": "evotrainer.fleet.registry",
    "TaskResult": "evotrainer.fleet.registry",
    "register_kind": "evotrainer.fleet.registry",
    "request_task": "evotrainer.fleet.registry",
    "request_tasks": "evotrainer.fleet.registry",
    "TaskSpec": "evotrainer.fleet.registry",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'evotrainer.fleet' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_EXPORTS[name]), name)
