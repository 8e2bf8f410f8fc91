"""Work a person (or an agent) asks for on one branch: a `train` or `evaluate` task,
requested as an event and, without a broker, run in this process; and the harness a
branch runs under. `evotrainer train|evaluate|harness` and the MCP server are this plus
formatting.

    run = request_work(store, BranchRef("demo", "main"), "train", training_inputs(policy="latest"))
    run.events, run.failure

Everything is validated before the request is recorded: an unknown domain, a bad file,
a setting GRPO refuses is a UsageError and nothing is written.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evotrainer.errors import UsageError
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, StoredEvent

Inputs = Callable[[EventStore, BranchRef, str], dict[str, object]]
"""Builds a task's inputs from the store, the branch and its domain."""


@dataclass(frozen=True)
class TaskRun:
    """One requested task and what it produced here (nothing when a worker will run it)."""

    kind: str
    task_id: str
    branch: str
    requested_seq: int
    ran_here: bool
    """False when a broker is configured: a worker runs it (see `evotrainer tasks`)."""
    events: tuple[StoredEvent, ...]
    """The TaskRequested and every event the task appended, in order."""

    @property
    def failure(self) -> str | None:
        """The TaskFailed message, if the task failed."""
        failed = next((e for e in self.events if e.type == "TaskFailed"), None)
        return None if failed is None else str(failed.payload["message"])


def latest_policy(store: EventStore, ref: BranchRef) -> str | None:
    """The newest policy checkpoint recorded in the branch's history, if any."""
    from evotrainer.evolve.promotion import newest_policy

    return newest_policy(store.read_branch(ref))


def experiment_domain(store: EventStore, ref: BranchRef) -> str:
    """The domain the branch's experiment was created for: the full spec in its config
    (`evotrainer run` records e.g. math:digit_add there), else its domain (math, code, swe);
    UsageError when it names neither."""
    created = store.read_branch(BranchRef(ref.experiment, "main"), upto_seq=1)[0].payload
    config = created.get("config")
    spec = config.get("domain") if isinstance(config, dict) else None
    if isinstance(spec, str) and spec:
        return spec
    if created.get("domain"):
        return str(created["domain"])
    raise UsageError(f"experiment {ref.experiment} names no domain: pass --domain (see `evotrainer domains list`)")


def training_inputs(policy: str = "latest", overrides: dict[str, Any] | None = None) -> Inputs:
    """A `train` task's inputs: GRPO under the branch's harness, `overrides` (max_steps,
    seed, learning_rate, num_generations, prompts_per_step) replacing single settings."""
    from evotrainer.harness.versions import branch_harness
    from evotrainer.training.task import training_request

    given = {k: v for k, v in (overrides or {}).items() if v is not None}

    def inputs(store: EventStore, branch: BranchRef, domain: str) -> dict[str, object]:
        start = latest_policy(store, branch) if policy == "latest" else policy
        harness = branch_harness(store, branch)
        settings = harness.spec.to_grpo_settings(**given).to_dict()
        request = training_request({"domain": domain, "policy": start or "tiny", "settings": settings})
        # The run is recorded as under the harness only when nothing overrode it.
        exact = harness.recorded_seq is not None and not given
        return {**request.to_dict(), "harness_hash": harness.address if exact else None}

    return inputs


def evaluation_inputs(policy: str = "latest", overrides: dict[str, Any] | None = None) -> Inputs:
    """An `evaluate` task's inputs: Avg@k under the branch harness's evaluation protocol,
    `overrides` (k, eval_tasks, temperature, seed) replacing single settings."""
    from evotrainer.harness.versions import branch_harness
    from evotrainer.training.task import evaluation_request

    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    unknown = sorted(set(given) - {"k", "eval_tasks", "temperature", "seed"})
    if unknown:
        raise UsageError(f"no evaluation setting {', '.join(unknown)} (k, eval_tasks, temperature, seed)")

    def inputs(store: EventStore, branch: BranchRef, domain: str) -> dict[str, object]:
        spec = latest_policy(store, branch) if policy == "latest" else policy
        protocol = branch_harness(store, branch).spec.evaluation
        defaults = {"k": protocol.k, "eval_tasks": protocol.eval_tasks, "temperature": protocol.temperature,
                    "seed": protocol.seed}  # fmt: skip
        request = evaluation_request({"domain": domain, "policy": spec or "tiny", **defaults, **given})
        return request.to_dict()

    return inputs


def request_work(store: EventStore, branch: BranchRef, kind: str, build_inputs: Inputs,
                 domain: str | None = None) -> TaskRun:  # fmt: skip
    """Validate, request, and (with no broker) execute in this process."""
    from evotrainer import config
    from evotrainer.domains import get_domain, with_file_relative_to
    from evotrainer.fleet import request_task, run_in_process

    store.branch(branch)
    # A relative file (math:file=data.jsonl) is recorded absolute: a worker may start elsewhere.
    domain = with_file_relative_to(domain or experiment_domain(store, branch), Path.cwd())
    get_domain(domain)  # refuse an unknown domain or a bad file before anything is recorded
    task_id = f"{kind}-{uuid.uuid4().hex[:12]}"
    requested = request_task(store, branch, kind, task_id, build_inputs(store, branch, domain))
    if config.broker_url():
        return TaskRun(kind, task_id, str(branch), requested.seq, False, (requested,))
    run_in_process(store)
    produced = [e for e in store.read_branch(branch, after_seq=requested.seq - 1)
                if (e.idempotency_key or "").startswith(f"{task_id}:")
                or e.payload.get("task_id") == task_id]  # fmt: skip
    return TaskRun(kind, task_id, str(branch), requested.seq, True, tuple(produced))
