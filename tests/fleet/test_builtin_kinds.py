"""The kinds evotrainer ships run through the fleet: requested, executed, completed once."""

from __future__ import annotations

from pathlib import Path

import pytest

from evotrainer.artifacts import open_store
from evotrainer.evidence import to_jsonl
from evotrainer.fleet import request_task, run_in_process
from evotrainer.fleet.registry import registered_kinds
from evotrainer.harness import HarnessSpec, design_intervention
from evotrainer.harness.versions import versioned_event
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, NewEvent
from tests.backtest.test_replay import EVIDENCE

MAIN = BranchRef("demo", "main")


def test_builtin_kinds_are_registered() -> None:
    assert {"train", "evaluate", "diagnose", "backtest", "noop"} <= set(registered_kinds())


def test_diagnose_and_backtest_run_as_fleet_tasks(
    store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVOTRAINER_ARTIFACTS", str(tmp_path / "artifacts"))
    sha = open_store().put_bytes(to_jsonl(EVIDENCE))
    store.create_experiment("demo", {"domain": "math"})
    store.append(MAIN, [NewEvent("RolloutsRecorded", {"evidence_sha256": sha, "policy_sha256": "b" * 64,
                                                      "base_policy_sha256": "b" * 64})])
    spec = HarnessSpec()
    proposal = design_intervention(spec, {"rewards.weights.format": 0.5}, hypothesis="h").event
    store.append(MAIN, [NewEvent.of(proposal), versioned_event(spec)])

    request_task(store, MAIN, "diagnose", "diag-1")
    request_task(store, MAIN, "backtest", "bt-1", {"intervention_id": proposal.intervention_id})
    outcomes = run_in_process(store)
    assert sorted(o.state for o in outcomes) == ["completed", "completed"]

    history = store.read_branch(MAIN)
    types = [e.type for e in history]
    assert types.count("TaskCompleted") == 2 and "TaskFailed" not in types
    assert "DiagnosisRecorded" in types
    backtest = next(e for e in history if e.type == "BacktestCompleted")
    assert backtest.payload["figures"]["dead_groups_rescued"] == 2 and backtest.payload["passed"]
    assert run_in_process(store) == []  # nothing left, nothing run twice
