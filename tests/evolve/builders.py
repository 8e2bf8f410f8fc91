"""A small search on the real store: main evaluated, interventions proposed on it, and
candidate branches that trained, were diagnosed and were evaluated. The events are the
ones `train`, `diagnose` and `evaluate` append, with chosen scores and findings, recorded as
their work records them (lineage.provenance): an evaluation with its task's outcome, in
one append, a diagnosis or a backtest under its command's key."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import uuid
from typing import Any

from evotrainer.artifacts import ArtifactStore, open_store
from evotrainer.harness import HarnessSpec
from evotrainer.harness.intervention import design_intervention
from evotrainer.harness.versions import versioned_event
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, NewEvent, StoredEvent

PROTOCOL = {"domain": "math:digit_add", "policy": "latest", "k": 4, "eval_tasks": 4, "temperature": 1.0,
            "max_completion_length": 16, "seed": 0, "data_seed": 0, "threads": 1, "batch_size": 64}  # fmt: skip


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def start(store: EventStore, spec: HarnessSpec | None = None) -> BranchRef:
    """demo/main with a recorded harness and an evaluated base policy."""
    store.create_experiment("demo", {"domain": "math"})
    main = BranchRef("demo", "main")
    store.append(main, [versioned_event(spec or HarnessSpec())])
    checkpoint(store, main, "base")
    return main


def checkpoint(store: EventStore, ref: BranchRef, name: str) -> str:
    policy = sha(f"policy {name}")
    store.append(ref, [NewEvent("PolicyCheckpointed", {"policy_sha256": policy, "kind": "tiny", "parameters": 10,
                                                       "size_bytes": 40})])  # fmt: skip
    return policy


def evaluate(store: EventStore, ref: BranchRef, per_problem: list[float], artifacts: ArtifactStore | None = None,
             *, stored: bool = True, **protocol: Any) -> StoredEvent:  # fmt: skip
    """EvaluationRecorded of the branch's newest policy, its results artifact stored in
    `artifacts` (by default the store the gate reads: open_store() under EVOTRAINER_HOME);
    `stored=False` records the hash of results kept nowhere."""
    policy = next(e.payload["policy_sha256"] for e in reversed(store.read_branch(ref))
                  if e.type == "PolicyCheckpointed")  # fmt: skip
    lines = "".join(json.dumps({"task_id": f"t{i}", "level": 1, "avg": avg, "samples": []}) + "\n"
                    for i, avg in enumerate(per_problem))  # fmt: skip
    results = (artifacts or open_store()).put_bytes(lines.encode()) if stored else sha(lines)
    request = {**PROTOCOL, **protocol, "eval_tasks": len(per_problem)}
    return as_task(store, ref, "evaluate", NewEvent("EvaluationRecorded", {
        "request": request, "policy_sha256": policy, "metric": f"avg@{request['k']}",
        "avg_at_k": sum(per_problem) / len(per_problem), "pass_at_k": 1.0, "k": request["k"],
        "problems": len(per_problem), "results_sha256": results, "wall_seconds": 1.0}))  # fmt: skip


def as_task(store: EventStore, ref: BranchRef, kind: str, result: NewEvent) -> StoredEvent:
    """Append `result` as a fleet task of `kind` records it: its TaskRequested, then the
    result and the TaskCompleted in one transaction, caused by the request."""
    task_id = f"{kind}-{uuid.uuid4().hex[:12]}"
    requested = store.append(ref, [NewEvent("TaskRequested", {"task_id": task_id, "kind": kind, "queue": kind},
                                            idempotency_key=f"{task_id}:requested")])[0]  # fmt: skip
    completed = NewEvent("TaskCompleted", {"task_id": task_id, "worker": "builders", "attempt": 1, "duration_s": 0},
                         idempotency_key=f"{task_id}:outcome", causation_id=requested.event_id)  # fmt: skip
    caused = dataclasses.replace(result, causation_id=requested.event_id, idempotency_key=f"{task_id}:1")
    return store.append(ref, [caused, completed])[0]


def propose(store: EventStore, ref: BranchRef, field: str, value: Any, criterion: str | None = None) -> str:
    from evotrainer.harness.versions import branch_harness

    designed = design_intervention(branch_harness(store, ref).spec, {field: value}, hypothesis="if X then Y because Z",
                                   success_criterion=criterion)  # fmt: skip
    store.append(ref, [NewEvent.of(designed.event, idempotency_key=f"intervention:{designed.event.intervention_id}")])
    return designed.event.intervention_id


def backtest(store: EventStore, ref: BranchRef, intervention_id: str, figures: dict[str, Any], passed: bool,
             evidence: str = "evidence") -> None:  # fmt: skip
    """BacktestCompleted as `evotrainer backtest` records it (keyed by intervention and evidence)."""
    store.append(ref, [NewEvent("BacktestCompleted", {
        "intervention_id": intervention_id, "kind": "reward", "evidence": sha(evidence), "figures": figures,
        "criterion": "dead_groups_rescued >= 1 and ordering_violations_introduced == 0", "passed": passed},
        idempotency_key=f"backtest:{intervention_id}:{sha(evidence)}")])  # fmt: skip


def trained(store: EventStore, ref: BranchRef, name: str, findings: list[dict[str, Any]] | None = None,
            conditions: list[str] | None = None, diagnosed: bool = True, unmeasured: tuple[str, ...] = ()) -> None:  # fmt: skip
    """A run of the branch's own: a new policy, its rollout evidence and (unless told not
    to) a diagnosis of it, measuring every default analyzer but `unmeasured`."""
    policy = checkpoint(store, ref, name)
    evidence = sha(f"evidence {name}")
    store.append(ref, [NewEvent("RolloutsRecorded", {"evidence_sha256": evidence, "policy_sha256": policy,
                                                     "base_policy_sha256": sha("policy base")})])  # fmt: skip
    if diagnosed:
        measured = {name: finding(name, None) for name in HarnessSpec().diagnostics if name not in unmeasured}
        measured.update({f["analyzer"]: f for f in findings or []})
        store.append(ref, [NewEvent("DiagnosisRecorded", {
            "evidence": evidence, "findings": list(measured.values()), "conditions": conditions or []},
            idempotency_key=f"diagnosis:{evidence}:None")])  # as `evotrainer diagnose` keys it


def finding(metric: str, value: float | None, severity: str = "info") -> dict[str, Any]:
    """A finding as the diagnosis recorded it (`severity` under the candidate's own harness)."""
    return {"analyzer": metric, "analyzer_version": 1, "layer": "signal", "metric": metric, "value": value,
            "severity": severity}  # fmt: skip
