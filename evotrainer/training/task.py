"""Training and evaluation as the fleet runs them: a JSON request in, events out.

    events = run_training_task({"domain": "math:digit_add", "policy": "tiny", "settings": {...}})

These are plain functions (no database, no broker): the caller, a worker or the CLI,
appends the returned events to the branch, so a task redelivered by the broker and run
again appends nothing new (its idempotency keys already exist).
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

from evotrainer.artifacts import is_artifact_id
from evotrainer.errors import UsageError
from evotrainer.events import EvaluationRecorded, Event, PolicyCheckpointed, RolloutsRecorded, TrainingCompleted
from evotrainer.store.records import NewEvent
from evotrainer.training.grpo_config import EvaluationRequest, GRPOSettings, TrainingRequest


def _known(cls: type, data: dict[str, Any], what: str) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise UsageError(f"unknown {what} field(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
    return data


def training_request(data: dict[str, Any]) -> TrainingRequest:
    """Rebuild a TrainingRequest from its JSON form, refusing unknown fields by name."""
    data = dict(_known(TrainingRequest, data, "training request"))
    settings = _known(GRPOSettings, dict(data.pop("settings", {})), "GRPO setting")
    if "levels" in settings:
        settings["levels"] = tuple(settings["levels"])
    try:
        return TrainingRequest(settings=GRPOSettings(**settings), **data)
    except TypeError as exc:
        raise UsageError(f"bad training request: {exc}") from None


def evaluation_request(data: dict[str, Any]) -> EvaluationRequest:
    try:
        return EvaluationRequest(**_known(EvaluationRequest, dict(data), "evaluation request"))
    except TypeError as exc:
        raise UsageError(f"bad evaluation request: {exc}") from None


def finite(value: Any) -> Any:
    """JSON has no NaN or infinity; TRL logs them (e.g. a KL term that is off): store null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def _event(model: type[Event], payload: dict[str, Any], key: str | None, suffix: str) -> NewEvent:
    event = model.model_validate(finite(payload))
    return NewEvent.of(event, idempotency_key=f"{key}:{suffix}" if key else None)


def run_training_task(
    inputs: dict[str, Any], key: str | None = None, harness_hash: str | None = None
) -> list[NewEvent]:
    """Train, and return PolicyCheckpointed (base, if new; trained), RolloutsRecorded and TrainingCompleted."""
    from evotrainer.training.grpo_trainer import train_grpo

    request = training_request(inputs)
    result = train_grpo(request)
    events = []
    # A named starting point (tiny, smollm2, a local directory) is recorded as a checkpoint
    # of its own, so the trained policy's parent is always in the lineage.
    if result.base_policy.created or not is_artifact_id(request.policy):
        events.append(_event(PolicyCheckpointed, result.base_policy.event_payload(), key, "base-policy"))
    events.append(_event(PolicyCheckpointed, result.policy_payload(), key, "policy"))
    events.append(
        _event(RolloutsRecorded, {**result.rollouts_payload(), "harness_hash": harness_hash}, key, "rollouts")
    )
    events.append(
        _event(TrainingCompleted, {**result.training_payload(), "harness_hash": harness_hash}, key, "training")
    )
    return events


def run_evaluation_task(inputs: dict[str, Any], key: str | None = None) -> list[NewEvent]:
    """Evaluate Avg@k and return EvaluationRecorded, after the PolicyCheckpointed of a named
    starting point (tiny, smollm2, a local directory): the policy an evaluation scores is
    always in the lineage, even before anything trained it."""
    from evotrainer.training.evaluation import evaluate

    # `starting_point`: a stored policy (a sha256) that an experiment starts from is
    # recorded on its main branch like a named one (the controller asks for it there only).
    inputs = dict(inputs)
    starting_point = bool(inputs.pop("starting_point", False))
    request = evaluation_request(inputs)
    result = evaluate(request)
    events = []
    if result.base_policy is not None and (starting_point or not is_artifact_id(request.policy)):
        events.append(_event(PolicyCheckpointed, result.base_policy.event_payload(), key, "base-policy"))
    events.append(_event(EvaluationRecorded, result.evaluation_payload(), key, "evaluation"))
    return events
