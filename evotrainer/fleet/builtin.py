"""The task kinds evotrainer itself ships: train, evaluate, diagnose, backtest.

Each is a thin adapter from the fleet's TaskRequest to a plain function of the core, so
the heavy modules (torch, TRL) load only in the worker that runs such a task. The
request's task id keys the idempotency of what it appends: a redelivered task that
already finished appends nothing new.
"""

from __future__ import annotations

from evotrainer.fleet.registry import TaskRequest, TaskResult, register_kind


def _key(request: TaskRequest) -> str:
    return f"{request.task.task_id}"


@register_kind("train", queue="train")
def train(request: TaskRequest) -> TaskResult:
    """inputs: a TrainingRequest as JSON (domain, policy, settings, train_tasks, data_seed), and
    optionally the harness_hash the settings were taken from."""
    from evotrainer.training.task import run_training_task

    inputs = dict(request.inputs)
    harness_hash = inputs.pop("harness_hash", None)
    events = run_training_task(inputs, key=_key(request), harness_hash=harness_hash)
    policy = next(e.payload["policy_sha256"] for e in reversed(events) if e.type == "PolicyCheckpointed")
    return TaskResult(events=events, outputs={"policy_sha256": policy})


@register_kind("evaluate", queue="evaluate")
def evaluate(request: TaskRequest) -> TaskResult:
    """inputs: an EvaluationRequest as JSON (domain, policy, k, eval_tasks, seed, ...)."""
    from evotrainer.training.task import run_evaluation_task

    events = run_evaluation_task(dict(request.inputs), key=_key(request))
    return TaskResult(events=events, outputs={"avg_at_k": events[-1].payload["avg_at_k"]})


@register_kind("diagnose", queue="diagnose")
def diagnose(request: TaskRequest) -> TaskResult:
    """inputs: {"evidence"?: sha256}; the branch is the request's own."""
    from evotrainer.diagnostics.task import diagnose_task

    return TaskResult(events=diagnose_task(request.store, {"branch": str(request.ref), **dict(request.inputs)}))


@register_kind("backtest", queue="backtest")
def backtest(request: TaskRequest) -> TaskResult:
    """inputs: {"intervention_id", "evidence"?, "domain"?, ...}; the branch is the request's own."""
    from evotrainer.backtest.task import backtest_task

    return TaskResult(events=backtest_task(request.store, {"branch": str(request.ref), **dict(request.inputs)}))
