"""`evotrainer harness|diagnose|propose|backtest` against the real database and artifacts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from evotrainer.artifacts import open_store
from evotrainer.evidence import to_jsonl
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, NewEvent
from tests.backtest.test_replay import EVIDENCE
from tests.harness.cli_app import main

POLICY = "a" * 64


@pytest.fixture
def seeded(store: EventStore, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> EventStore:
    """demo/main with one run's evidence (EVIDENCE: 4 of 5 groups dead) in a fresh artifact store."""
    monkeypatch.setenv("EVOTRAINER_DATABASE_URL", database_url)
    monkeypatch.setenv("EVOTRAINER_ARTIFACTS", str(tmp_path / "artifacts"))
    monkeypatch.setenv("EVOTRAINER_HOME", str(tmp_path / "home"))
    sha = open_store().put_bytes(to_jsonl(EVIDENCE))
    store.create_experiment("demo", {"domain": "math"})
    store.append(BranchRef("demo", "main"), [NewEvent("RolloutsRecorded", {
        "evidence_sha256": sha, "policy_sha256": POLICY, "base_policy_sha256": POLICY})])  # fmt: skip
    return store


def types(store: EventStore) -> list[str]:
    return [e.type for e in store.read_branch(BranchRef("demo", "main"))]


def test_show_and_diff(seeded: EventStore, capsys: pytest.CaptureFixture[str]) -> None:
    assert main("harness", "show", "demo/main") == 0
    out = capsys.readouterr().out
    assert "(default, not recorded)" in out and re.search(r"^diagnostics.dead_group_ratio.warning +0.3$", out, re.M)
    seeded.fork(BranchRef("demo", "main"), "hot")
    spec = json.dumps({"grpo": {"temperature": 1.3}})
    assert main("harness", "record", "demo/hot", "--spec", spec) == 0
    capsys.readouterr()
    assert main("harness", "diff", "demo/main", "demo/hot", "--json") == 0
    assert json.loads(capsys.readouterr().out)["changes"] == [{"field": "grpo.temperature", "a": 1.0, "b": 1.3}]


def test_diagnose_records_a_diagnosis(seeded: EventStore, capsys: pytest.CaptureFixture[str]) -> None:
    assert main("diagnose", "demo/main", "--json") == 0
    report = json.loads(capsys.readouterr().out)
    dead = next(f for f in report["findings"] if f["metric"] == "dead_group_ratio")
    assert dead["value"] == 0.8 and dead["severity"] == "critical"
    assert "insufficient_signal" in [c["name"] for c in report["conditions"]]
    assert types(seeded)[-2:] == ["HarnessVersioned", "DiagnosisRecorded"]
    assert main("diagnose", "demo/main") == 0  # idempotent: nothing new
    assert "condition insufficient_signal" in capsys.readouterr().out
    assert types(seeded).count("DiagnosisRecorded") == 1


def test_refused_and_accepted_interventions_and_a_backtest(
    seeded: EventStore, capsys: pytest.CaptureFixture[str]
) -> None:
    before = types(seeded)
    code = main("propose", "demo/main", "--set", "rewards.weights.format=0.5", "--set", "grpo.temperature=1.2",
                "--hypothesis", "both help")
    assert code == 2 and types(seeded) == before  # nothing written
    assert "changes 2: grpo.temperature, rewards.weights.format" in capsys.readouterr().err
    assert main("propose", "demo/main", "--set", "grpo.temprature=1.2", "--hypothesis", "h") == 2
    assert "grpo has fields" in capsys.readouterr().err
    assert main("propose", "demo/main", "--set", "rewards.weights.format=0.5", "--hypothesis",
                "if format earns 0.5, dead groups get a gradient because format varies inside them", "--json") == 0
    proposal = json.loads(capsys.readouterr().out)
    assert proposal["field"] == "rewards.weights.format" and proposal["new_value"] == 0.5
    assert main("backtest", "demo/main", proposal["intervention_id"], "--json") == 0
    result = json.loads(capsys.readouterr().out)
    assert result["passed"] and result["figures"]["dead_groups_rescued"] == 2
    assert types(seeded)[-1] == "BacktestCompleted"
    assert main("backtest", "demo/main", "iv-missing") == 2
    assert "no intervention 'iv-missing'" in capsys.readouterr().err


def test_a_backtest_that_misses_its_criterion_fails(seeded: EventStore, capsys: pytest.CaptureFixture[str]) -> None:
    assert main("propose", "demo/main", "--set", "rewards.weights.format=2", "--hypothesis", "h", "--id", "heavy") == 0
    capsys.readouterr()
    assert main("backtest", "demo/main", "heavy") == 0
    out = capsys.readouterr().out
    assert "failed: ordering_violations_introduced == 0" in out and out.rstrip().splitlines()[-2] == "FAILED"
    last = seeded.read_branch(BranchRef("demo", "main"))[-1]
    assert last.type == "BacktestCompleted" and last.payload["passed"] is False
    assert last.payload["figures"]["ordering_violations_introduced"] == 3


def test_a_branch_can_go_back_to_an_earlier_harness(seeded: EventStore, capsys: pytest.CaptureFixture[str]) -> None:
    from evotrainer.harness.versions import branch_harness

    main_ref = BranchRef("demo", "main")
    assert main("harness", "record", "demo/main") == 0
    default = branch_harness(seeded, main_ref).address
    assert main("harness", "record", "demo/main", "--spec", '{"grpo": {"temperature": 1.2}}') == 0
    assert branch_harness(seeded, main_ref).address != default
    assert main("harness", "record", "demo/main") == 0  # the rollback: A -> B -> A
    back = branch_harness(seeded, main_ref)
    assert back.address == default and types(seeded).count("HarnessVersioned") == 3
    assert main("harness", "record", "demo/main") == 2  # already there: refused, nothing written
    assert "already runs under harness" in capsys.readouterr().err
    assert types(seeded).count("HarnessVersioned") == 3


def test_a_diagnostic_or_gate_change_needs_retro_validation_or_a_recorded_override(
    seeded: EventStore, capsys: pytest.CaptureFixture[str]
) -> None:
    main_ref = BranchRef("demo", "main")
    assert main("harness", "record", "demo/main") == 0
    from evotrainer.harness import HarnessSpec

    looser = json.dumps(HarnessSpec().with_field("diagnostics.reward_hacking.warning", 0.2).to_json())
    gate = json.dumps(HarnessSpec().with_field("promotion.min_margin", 0.2).to_json())
    assert main("harness", "record", "demo/main", "--spec", looser) == 2
    assert "diagnostics.reward_hacking changed without retro-validation" in capsys.readouterr().err
    assert main("harness", "record", "demo/main", "--spec", gate) == 2
    assert "promotion.min_margin changed without retro-validation" in capsys.readouterr().err
    assert types(seeded).count("HarnessVersioned") == 1  # nothing written
    assert main("harness", "record", "demo/main", "--spec", looser, "--override", "reviewed by hand") == 0
    recorded = [e for e in seeded.read_branch(main_ref) if e.type == "HarnessVersioned"][-1]
    assert recorded.payload["override"] == "reviewed by hand"
    assert "diagnostics.reward_hacking.warning" in recorded.payload["changed_fields"]
    # Retro-validated thresholds need no override (and record none).
    seeded.append(main_ref, [NewEvent("DiagnosticRevised", {
        "analyzer": "dead_group_ratio", "analyzer_version": 1, "change": "changed",
        "thresholds": {"warning": 0.2, "critical": 0.5}, "accepted": True})])  # fmt: skip
    validated = json.dumps(HarnessSpec().with_field("diagnostics.reward_hacking.warning", 0.2)
                           .with_field("diagnostics.dead_group_ratio.warning", 0.2).to_json())
    assert main("harness", "record", "demo/main", "--spec", validated) == 0
    last = [e for e in seeded.read_branch(main_ref) if e.type == "HarnessVersioned"][-1]
    assert last.payload["override"] is None and last.payload["changed_fields"] == ["diagnostics.dead_group_ratio.warning"]


def test_replay_diagnoses_again_what_the_command_recorded(seeded: EventStore, capsys: pytest.CaptureFixture[str]) -> None:
    assert main("diagnose", "demo/main") == 0
    capsys.readouterr()
    assert main("replay", "demo/main") == 0
    out = capsys.readouterr().out
    assert "demo/main@4 diagnose (recorded by its command): identical" in out
    assert out.splitlines()[-1] == "identical: 1 tasks re-executed (diagnose 1), every output the same"
    # Under the command's key, but not what the command computes (another harness, no condition).
    real = next(e for e in seeded.read_branch(BranchRef("demo", "main")) if e.type == "DiagnosisRecorded")
    other = "f" * 64
    seeded.append(BranchRef("demo", "main"), [NewEvent("DiagnosisRecorded", {
        **real.payload, "harness_hash": other, "conditions": []},
        idempotency_key=f"diagnosis:{real.payload['evidence']}:{other}")])  # fmt: skip
    assert main("replay", "demo/main") == 1
    assert "DIFFERENT: DiagnosisRecorded (seq 5) " in capsys.readouterr().out
