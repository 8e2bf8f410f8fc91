"""The diagnose and backtest tasks as the fleet calls them: (store, request) -> events."""

from __future__ import annotations

from pathlib import Path

import pytest

from evotrainer.artifacts import open_store
from evotrainer.backtest.task import backtest_task
from evotrainer.diagnostics.task import diagnose_task
from evotrainer.errors import NotFoundError, UsageError
from evotrainer.evidence import to_jsonl
from evotrainer.harness import HarnessSpec, design_intervention
from evotrainer.harness.versions import branch_harness, versioned_event
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, NewEvent
from tests.backtest.test_replay import EVIDENCE

MAIN = BranchRef("demo", "main")


def test_tasks_return_idempotent_events(store: EventStore, tmp_path: Path) -> None:
    artifacts = open_store(tmp_path / "arts")
    sha = artifacts.put_bytes(to_jsonl(EVIDENCE))
    store.create_experiment("demo", {"domain": "math"})
    with pytest.raises(NotFoundError, match="no rollout evidence"):
        diagnose_task(store, {"inputs": {"branch": "demo/main"}}, artifacts)
    store.append(MAIN, [NewEvent("RolloutsRecorded", {"evidence_sha256": sha, "policy_sha256": "b" * 64,
                                                      "base_policy_sha256": "b" * 64})])  # fmt: skip
    events = diagnose_task(store, {"inputs": {"branch": "demo/main"}}, artifacts)
    assert [e.type for e in events] == ["HarnessVersioned", "DiagnosisRecorded"]
    first = store.append(MAIN, events)
    assert store.append(MAIN, diagnose_task(store, {"branch": "demo/main"}, artifacts)) == [first[-1]]
    assert branch_harness(store, MAIN).recorded_seq == first[0].seq

    spec = HarnessSpec()
    proposal = design_intervention(spec, {"rewards.weights.format": 0.5}, hypothesis="h").event
    store.append(MAIN, [NewEvent.of(proposal), versioned_event(spec)])
    out = backtest_task(store, {"inputs": {"branch": "demo/main", "intervention_id": proposal.intervention_id}},
                        artifacts)  # fmt: skip
    assert len(out) == 1 and out[0].type == "BacktestCompleted"
    assert out[0].payload["passed"] and out[0].payload["figures"]["dead_groups_rescued"] == 2
    assert out[0].payload["evidence"] == sha
    with pytest.raises(UsageError, match="inputs.branch"):
        backtest_task(store, {"inputs": {}}, artifacts)
