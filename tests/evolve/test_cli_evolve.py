"""`evotrainer fork --intervention` and `evotrainer promote` as scripts run them: real
processes on the test database, exit 0 promoted / 1 rejected / 2 usage error."""

from __future__ import annotations

import json

from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, NewEvent
from tests.evolve.builders import evaluate, propose, start, trained
from tests.test_cli import run


def test_fork_an_intervention_then_promote_it(cli_env: dict[str, str], store: EventStore) -> None:
    main = start(store)
    evaluate(store, main, [0.5, 0.25])
    iid = propose(store, main, "grpo.learning_rate", 2e-5)
    forked = run(cli_env, "fork", "demo/main", "lr-up", "--intervention", iid)
    assert forked.returncode == 0, forked.stderr
    assert [e["type"] for e in json.loads(forked.stdout)] == ["BranchForked", "HarnessVersioned"]

    lr = BranchRef("demo", "lr-up")
    early = run(cli_env, "promote", "demo/lr-up")
    assert (early.returncode, early.stdout) == (2, "")
    assert early.stderr.startswith("evotrainer: error: demo/lr-up has no training run of its own") \
        and early.stderr.count("\n") == 1
    trained(store, lr, "lr-up")
    evaluate(store, lr, [0.75, 0.5])
    dry = run(cli_env, "promote", "demo/lr-up", "--no-record", "--json")
    assert dry.returncode == 0 and json.loads(dry.stdout)["recorded_at"] is None
    assert store.head(main)[0] == json.loads(forked.stdout)[0]["payload"]["fork_seq"]  # --no-record wrote nothing

    promoted = run(cli_env, "promote", "demo/lr-up")
    assert promoted.returncode == 0, promoted.stderr
    lines = promoted.stdout.splitlines()
    assert lines[0] == "promoted demo/lr-up"
    assert "avg@4 0.6250 against 0.3750 of demo/main (gain +0.2500, 95% interval of the gain" in lines[1]
    assert "must clear 0), no blocking diagnostic" in lines[1]
    assert lines[-1].startswith("recorded PromotionDecided at demo/main@")

    audited = run(cli_env, "audit", "demo/lr-up", "--promotions")
    assert audited.returncode == 0, audited.stderr
    shown = audited.stdout.splitlines()
    assert shown[0].startswith("intact:") and shown[1].startswith("demo/main@") and "promoted: avg@4 0.6250" in shown[1]
    assert shown[2].startswith("  candidate evaluation: demo/lr-up policy ") and "gate: harness" in audited.stdout
    assert "criterion avg_at_k_gain >= 0.01: success" in audited.stdout  # the default criterion
    as_json = json.loads(run(cli_env, "audit", "demo/main", "--promotions", "--json").stdout)
    assert as_json["promotions"] == []  # main's lineage holds no candidate


def test_a_rejected_candidate_exits_1_and_the_decision_is_recorded(cli_env: dict[str, str], store: EventStore) -> None:
    main = start(store)
    evaluate(store, main, [0.5, 0.5])
    iid = propose(store, main, "grpo.temperature", 1.2)
    assert run(cli_env, "fork", "demo/main", "hot", "--intervention", iid).returncode == 0
    hot = BranchRef("demo", "hot")
    trained(store, hot, "hot")
    evaluate(store, hot, [0.5, 0.25])
    rejected = run(cli_env, "promote", "demo/hot", "--json")
    assert rejected.returncode == 1, rejected.stderr
    payload = json.loads(rejected.stdout)
    assert payload["decision"] == "rejected" and payload["recorded_at"].startswith("demo/main@")
    assert [e.type for e in store.read_branch(main)][-2:] == ["PromotionDecided", "SkillRecorded"]


def test_bad_invocations_are_one_line_and_write_nothing(cli_env: dict[str, str], store: EventStore) -> None:
    main = start(store)
    iid = propose(store, main, "grpo.learning_rate", 2e-5)
    head = store.head(main)
    for args, message in [
        (["promote", "demo/main"], "demo/main is the best so far already"),
        (["promote", "demo/nope"], "no branch demo/nope"),
        (["promote", "demo/main@2"], "without @SEQ"),
        (["fork", "demo/main", "x", "--intervention", "iv-nope"], "no intervention 'iv-nope'"),
        (["fork", "demo/main", "x", "--intervention", iid, "--reason", "r"], "do not go together"),
    ]:
        result = run(cli_env, *args)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr and result.stderr.count("\n") == 1, (args, result.stderr)
    assert store.head(main) == head and [b.name for b in store.branches("demo")] == ["main"]


def test_audit_promotions_marks_a_decision_the_gate_did_not_record(cli_env: dict[str, str], store: EventStore) -> None:
    main = start(store)
    evaluate(store, main, [0.5, 0.25] * 20)
    iid = propose(store, main, "grpo.learning_rate", 2e-5)
    assert run(cli_env, "fork", "demo/main", "lr-up", "--intervention", iid).returncode == 0
    lr = BranchRef("demo", "lr-up")
    trained(store, lr, "lr-up")
    evaluate(store, lr, [0.75, 0.5] * 20)
    assert run(cli_env, "promote", "demo/lr-up").returncode == 0
    assert run(cli_env, "audit", "demo/lr-up", "--promotions").returncode == 0
    # Promoted again by hand, with the gate's evidence copied and a better score stated.
    verdict = next(e for e in store.read_branch(main) if e.type == "PromotionDecided")
    store.append(main, [NewEvent("PromotionDecided", {**verdict.payload, "candidate_score": 0.9},
                                 idempotency_key=verdict.idempotency_key + ":again")])  # fmt: skip
    store.append(main, [NewEvent("PromotionDecided", {"candidate": "demo/lr-up", "decision": "promoted"})])
    audited = run(cli_env, "audit", "demo/lr-up", "--promotions")
    assert audited.returncode == 1, audited.stdout + audited.stderr
    marks = [line.strip() for line in audited.stdout.splitlines() if "NOT THE GATE'S" in line]
    assert marks == [
        "NOT THE GATE'S: not recorded by the gate (its key is not the one the gate derives from its evidence)",
        "NOT THE GATE'S: recorded without the gate's evidence",
        "NOT THE GATE'S: 2 promotion decisions the gate did not record or cannot vouch for"]
    as_json = json.loads(run(cli_env, "audit", "demo/lr-up", "--promotions", "--json").stdout)
    assert [d["not_the_gates"] is None for d in as_json["promotions"]] == [True, False, False]
