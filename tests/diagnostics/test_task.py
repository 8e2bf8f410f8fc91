"""The diagnose and backtest tasks as the fleet calls them: (store, request) -> events."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evotrainer.artifacts import open_store
from evotrainer.backtest.task import backtest_task
from evotrainer.diagnostics.task import diagnose_task
from evotrainer.errors import NotFoundError, UsageError
from evotrainer.evidence import to_jsonl
from evotrainer.harness import HarnessSpec, design_intervention
from evotrainer.harness.versions import branch_harness, versioned_event
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, NewEvent, StoredEvent
from tests.backtest.test_replay import EVIDENCE
from tests.evolve.builders import as_task

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


def test_diagnose_and_backtest_read_the_branch_history_once(
    store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    artifacts = open_store(tmp_path / "arts")
    sha = artifacts.put_bytes(to_jsonl(EVIDENCE))
    store.create_experiment("demo", {"domain": "math"})
    proposal = design_intervention(HarnessSpec(), {"rewards.weights.format": 0.5}, hypothesis="h").event
    store.append(MAIN, [versioned_event(HarnessSpec()), NewEvent.of(proposal)])
    as_task(store, MAIN, "evaluate", NewEvent("EvaluationRecorded", {
        "request": {}, "policy_sha256": "b" * 64, "metric": "avg@8", "avg_at_k": 0.3, "pass_at_k": 0.5, "k": 8,
        "problems": 32, "results_sha256": "c" * 64, "wall_seconds": 1.0}))  # fmt: skip
    store.append(MAIN, [NewEvent("RolloutsRecorded", {"evidence_sha256": sha, "policy_sha256": "b" * 64,
                                                      "base_policy_sha256": "b" * 64})])  # fmt: skip
    reads: list[BranchRef] = []
    read_branch = store.read_branch

    def counted(ref: BranchRef, *args: Any, **kwargs: Any) -> list[StoredEvent]:
        reads.append(ref)
        return read_branch(ref, *args, **kwargs)

    monkeypatch.setattr(store, "read_branch", counted)  # the real read, counted
    diagnosis = diagnose_task(store, {"branch": "demo/main"}, artifacts)
    assert reads == [MAIN]
    score = diagnosis[-1].payload["findings"][0]
    assert (score["metric"], score["value"]) == ("avg_at_k", 0.0)  # the evaluation came from that one read
    reads.clear()
    backtest_task(store, {"branch": "demo/main", "intervention_id": proposal.intervention_id}, artifacts)
    assert reads == [MAIN]


def test_an_evaluation_appended_by_hand_steers_no_diagnosis(store: EventStore, tmp_path: Path) -> None:
    artifacts = open_store(tmp_path / "arts")
    sha = artifacts.put_bytes(to_jsonl(EVIDENCE))
    store.create_experiment("demo", {"domain": "math"})
    evaluation = {"request": {}, "metric": "avg@8", "pass_at_k": 0.5, "k": 8, "problems": 32,
                  "results_sha256": "c" * 64, "wall_seconds": 1.0}  # fmt: skip
    store.append(MAIN, [versioned_event(HarnessSpec())])
    as_task(store, MAIN, "evaluate", NewEvent("EvaluationRecorded", {**evaluation, "policy_sha256": "a" * 64,
                                                                     "avg_at_k": 0.3}))  # fmt: skip
    as_task(store, MAIN, "evaluate", NewEvent("EvaluationRecorded", {**evaluation, "policy_sha256": "b" * 64,
                                                                     "avg_at_k": 0.2}))  # fmt: skip
    store.append(MAIN, [NewEvent("RolloutsRecorded", {"evidence_sha256": sha, "policy_sha256": "b" * 64,
                                                      "base_policy_sha256": "a" * 64})])  # fmt: skip
    honest = diagnose_task(store, {"branch": "demo/main"}, artifacts)[-1].payload
    # A better score for the newest policy, appended by hand after the evaluate task's.
    store.append(MAIN, [NewEvent("EvaluationRecorded", {**evaluation, "policy_sha256": "b" * 64, "avg_at_k": 0.9})])
    assert diagnose_task(store, {"branch": "demo/main"}, artifacts)[-1].payload == honest
