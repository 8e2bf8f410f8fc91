"""Human gates on the real store: the loop stops at a request (exit 4 from `evotrainer run`),
`evotrainer approve|revise|abort` (the client's methods of those names) record the answer,
and the loop resumes from it.

To reach a gate without training first, each test holds the start's continuation (a branch
of that name that is no candidate), so round 1 goes straight to a change: the rules'
first, a doubled learning rate, which no backtest can judge. A test that needs no training
after the gate stops the run right after the fork."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import evotrainer
from evotrainer.errors import NotFoundError, UsageError
from evotrainer.events import DecisionRequested
from evotrainer.evolve import fork_for_intervention
from evotrainer.evolve.controller import _last_verdict_inconclusive, _Run, run_experiment
from evotrainer.evolve.experiment_config import ExperimentConfig
from evotrainer.evolve.gates import DecisionPending, decision_for, describe, pending, record_decision, request_id
from evotrainer.evolve.promotion import gate_decisions, incumbent_of, newest_policy, reject_unrunnable
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore
from tests.evolve.builders import evaluate, propose, start, trained
from tests.test_cli import run

TINY = {"grpo": {"max_steps": 2, "num_generations": 4, "prompts_per_step": 2},
        "evaluation": {"k": 2, "eval_tasks": 4}}  # fmt: skip
MAIN = BranchRef("gated", "main")


def gated(store: EventStore, iterations: int = 3, **proposer: object) -> ExperimentConfig:
    """The experiment, its start evaluated on main, and the start's continuation held."""
    config = ExperimentConfig.parse({"name": "gated", "iterations": iterations, "harness": TINY,
                                     "proposer": proposer})  # fmt: skip
    _Run(store, config, lambda line: None).start()
    policy = newest_policy(store.read_branch(MAIN)) or ""
    store.fork(MAIN, f"continue-{policy[:10]}", "held by the test: the start is not continued")
    return config


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("artifacts")


@pytest.fixture(autouse=True)
def _one_artifact_store(monkeypatch: pytest.MonkeyPatch, artifacts: Path) -> None:
    """One artifact store for the module: the tiny policy's warm start, most of the cost of
    evaluating the start, is built once instead of once per test."""
    monkeypatch.setenv("EVOTRAINER_ARTIFACTS", str(artifacts))


class Crash(Exception):
    """Stands for the controller being killed."""


def until_the_fork(line: str) -> None:
    if " forked " in line:
        raise Crash


def waiting(store: EventStore, config: ExperimentConfig) -> DecisionPending:
    with pytest.raises(DecisionPending) as stopped:
        run_experiment(store, config)
    return stopped.value


def own_intervention(store: EventStore, prefix: str) -> dict:
    ref = next(info.ref for info in store.branches("gated") if info.name.startswith(prefix))
    forked = next(e for e in store.read_branch(ref) if e.type == "HarnessVersioned" and e.branch == ref.branch)
    return next(e for e in store.read_branch(MAIN) if e.event_id == forked.causation_id).payload


def gated_config() -> ExperimentConfig:
    return ExperimentConfig.parse({"name": "gated", "iterations": 1, "harness": TINY,
                                   "proposer": {"autonomy": "approve-interventions"}})  # fmt: skip


@pytest.mark.slow
def test_a_gated_run_stops_with_exit_4_is_approved_from_the_cli_and_finishes(
    store: EventStore, cli_env: dict[str, str], tmp_path: Path
) -> None:
    gated(store, iterations=1, autonomy="approve-interventions")
    path = tmp_path / "gated.toml"
    path.write_text('name = "gated"\niterations = 1\n[harness.grpo]\nmax_steps = 2\nnum_generations = 4\n'
                    'prompts_per_step = 2\n[harness.evaluation]\nk = 2\neval_tasks = 4\n'
                    '[proposer]\nautonomy = "approve-interventions"\n')  # fmt: skip
    stopped = run(cli_env, "run", str(path))
    assert stopped.returncode == 4, stopped.stderr
    (request,) = pending(store, "gated")
    ident = request.payload["request_id"]
    last = stopped.stdout.strip().splitlines()[-1]
    assert last.startswith("stopped: waiting for a human: intervention grpo.learning_rate -> 0.002 to run on gated/main")
    assert f"`evotrainer approve {ident}`" in last and f"`evotrainer revise {ident} --set FIELD=VALUE`" in last
    assert request.payload["subject"] == "intervention" and request.payload["proposal"]["proposer"] == "builtin"
    assert waiting(store, gated_config()).request.request_id == ident and len(pending(store, "gated")) == 1

    listed = run(cli_env, "pending")
    assert ident in listed.stdout and "grpo.learning_rate -> 0.002" in listed.stdout, listed.stderr
    status = run(cli_env, "status", "gated")
    assert f"waiting for a human decision: {ident}: intervention on gated/main (" in status.stdout, status.stdout
    assert "main  [waiting]" in run(cli_env, "lineage", "gated").stdout  # the dashboard's graph reads the same
    assert json.loads(run(cli_env, "pending", "gated", "--json").stdout)[0]["request_id"] == ident
    for args, message in ((["approve", "d-nope"], "no decision request d-nope"),
                          (["revise", ident], "revise needs the change"),
                          (["revise", ident, "--set", "grpo.beta=0.1", "--set", "grpo.temperature=2"], "changes 2"),
                          (["revise", ident, "--set", "promotion.min_margin=0"], "not a proposer's to change"),
                          (["revise", ident, "--set", "grpo.learning_rate=7"], "learning_rate")):  # fmt: skip
        refused = run(cli_env, *args)
        assert refused.returncode == 2 and message in refused.stderr and refused.stderr.count("\n") == 1, refused
    approved = run(cli_env, "approve", ident, "--note", "one step size first", "--actor", "alice")
    assert approved.returncode == 0 and approved.stdout.startswith(f"approved {ident} as alice: "), approved.stderr
    again = run(cli_env, "abort", ident)
    assert again.returncode == 2 and "was approved already, by alice" in again.stderr
    assert run(cli_env, "pending").stdout.strip() == "nothing waits for a decision"
    assert "waiting for a human decision" not in run(cli_env, "status", "gated").stdout
    assert "[waiting]" not in run(cli_env, "lineage", "gated").stdout

    finished = run(cli_env, "run", str(path))
    assert finished.returncode == 0, finished.stdout + finished.stderr
    decided = [e for e in store.read_branch(MAIN) if e.type in ("DecisionRecorded", "PromotionDecided")]
    assert [e.type for e in decided] == ["DecisionRecorded", "PromotionDecided"]
    assert decided[0].actor == "alice" and decided[0].payload["note"] == "one step size first"
    assert decided[1].payload["candidate"].startswith("gated/learning-rate-raise-")


def test_the_client_lists_and_answers_requests_validating_before_it_writes(
    store: EventStore, database_url: str
) -> None:
    """pending/approve/revise/abort of `evotrainer.connect()`, on requests recorded as the
    loop records them (no training needed): typed errors that write nothing, then one
    answer per request, each by its actor."""
    store.create_experiment("gated", {})
    change = {"field": "grpo.learning_rate", "value": 0.002, "proposer": "builtin"}
    asked = [DecisionRequested(request_id=request_id("gated", subject), subject=subject, branch="gated/main",
                               why="autonomy approve-interventions", proposal=change if subject != "promotion" else None)
             for subject in ("intervention", "proposal", "promotion")]  # fmt: skip
    for request in asked:
        with pytest.raises(DecisionPending):
            decision_for(store, request)
    ids = [r.request_id for r in asked]

    with evotrainer.connect(database_url, actor="bob") as db:
        table = db.pending("gated")
        assert table.column("request_id") == ids and db.pending().column("request_id") == ids
        assert table[0].waits_for == describe(asked[0]) and table[0].proposal == change
        assert list(table.to_pandas()["subject"]) == ["intervention", "proposal", "promotion"]
        head = store.head(MAIN)
        for call, error, message in (
            (lambda: db.pending("nope"), NotFoundError, "no experiment nope"),
            (lambda: db.approve("d-nope"), NotFoundError, "no decision request d-nope"),
            (lambda: db.revise(ids[0], " ", 1), UsageError, "revise needs the change"),
            (lambda: db.revise(ids[0], "promotion.min_margin", 0), UsageError, "not a proposer's to change"),
            (lambda: db.revise(ids[0], "grpo.learning_rate", 7), UsageError, "learning_rate"),
            (lambda: db.revise(ids[2], "grpo.temperature", 1.2), UsageError, "a promotion is approved or aborted"),
        ):  # fmt: skip
            with pytest.raises(error, match=message):
                call()
        assert store.head(MAIN) == head

        approved = db.approve(ids[0], note=" backtest looks right ")
        revised = db.revise(ids[1], "grpo.temperature", 1.2, note="hotter, not faster", actor="alice")
        aborted = db.abort(ids[2])
        with pytest.raises(UsageError, match="was approved already, by bob"):
            db.abort(ids[0])
        assert len(db.pending("gated")) == 0

    assert (approved.decision, approved.actor, approved.note, approved.changes) == ("approved", "bob",
                                                                                    "backtest looks right", {})
    assert approved.request == describe(asked[0]) and approved.recorded_at == f"gated/main@{head[0] + 1}"
    assert (revised.actor, revised.changes) == ("alice", {"grpo.temperature": 1.2})
    assert aborted.decision == "aborted" and aborted.recorded_at == f"gated/main@{head[0] + 3}"
    with pytest.raises(dataclasses.FrozenInstanceError):
        approved.note = "changed"  # type: ignore[misc]
    answers = [e for e in store.read_branch(MAIN) if e.type == "DecisionRecorded"]
    assert [(e.payload["request_id"], e.actor) for e in answers] == list(zip(ids, ["bob", "alice", "bob"],
                                                                             strict=True))  # fmt: skip


def test_revise_runs_the_persons_change_instead_without_asking_again(store: EventStore) -> None:
    config = gated(store, autonomy="approve-interventions")
    ident = waiting(store, config).request.request_id
    with pytest.raises(UsageError, match="a promotion is approved or aborted"):
        _revise_a_promotion(store)
    record_decision(store, ident, "revised", changes={"grpo.temperature": 1.2}, note="hotter, not faster")
    with pytest.raises(Crash):
        run_experiment(store, config, until_the_fork)
    proposed = own_intervention(store, "temperature-raise-")
    assert (proposed["new_value"], proposed["proposer"], proposed["hypothesis"]) == (1.2, "human", "hotter, not faster")
    assert pending(store, "gated") == []


def _revise_a_promotion(store: EventStore) -> None:
    from evotrainer.events import DecisionRequested
    from evotrainer.evolve.gates import check_revision

    asked = DecisionRequested(request_id="d-x", subject="promotion", branch="gated/main", why="test")
    check_revision(store, asked.model_dump(), {"grpo.temperature": 1.2}, "")


def test_abort_drops_the_intervention_and_the_next_one_waits(store: EventStore) -> None:
    config = gated(store, autonomy="approve-interventions")
    first = waiting(store, config).request
    record_decision(store, first.request_id, "aborted", note="not the step size")
    second = waiting(store, config).request
    assert second.request_id != first.request_id and second.proposal is not None
    assert (first.proposal or {})["field"] == "grpo.learning_rate" and second.proposal["value"] != 0.002
    assert not [info for info in store.branches("gated") if info.name.startswith("learning-rate-raise")]


def test_escalation_hands_control_to_a_human_after_n_rejections_in_a_row(store: EventStore) -> None:
    config = gated(store, autonomy="escalate-after-2")
    # One rejected version (its run failed): below the threshold, the loop decides alone.
    iid = propose(store, MAIN, "grpo.learning_rate", 5e-4)
    fork_for_intervention(store, MAIN, "broken", iid)
    reject_unrunnable(store, BranchRef("gated", "broken"), "train task failed: scripted")
    with pytest.raises(Crash):
        run_experiment(store, config, until_the_fork)
    assert pending(store, "gated") == []
    candidate = next(info.ref for info in store.branches("gated") if info.name.startswith("learning-rate-raise"))
    reject_unrunnable(store, candidate, "train task failed: scripted")
    # Two in a row: the next intervention waits for a person.
    request = waiting(store, config.model_copy(update={"iterations": 4})).request
    assert request.subject == "intervention" and "2 versions in a row were rejected" in request.why


def test_a_human_proposer_is_asked_for_the_change_and_approving_takes_the_rules_suggestion(store: EventStore) -> None:
    config = gated(store, kind="human")
    request = waiting(store, config).request
    assert request.subject == "proposal" and (request.proposal or {})["field"] == "grpo.learning_rate"
    record_decision(store, request.request_id, "approved")
    with pytest.raises(Crash):
        run_experiment(store, config, until_the_fork)
    proposed = own_intervention(store, "learning-rate-raise-")
    assert proposed["proposer"] == "human" and proposed["new_value"] == 0.002


def test_approve_promotions_waits_before_a_promotion_and_a_veto_counts_as_the_gates_rejection(
    store: EventStore,
) -> None:
    """On a small search whose candidates clear the gate (tests/evolve/builders.py), each
    promotion waits: the first is aborted (recorded as the gate's rejection, with who and
    why, and no second look), the second approved and promoted."""
    main = start(store)
    evaluate(store, main, [0.5, 0.5, 0.25, 0.25] * 20)
    candidates = []
    for name, field_path, value in (("a", "grpo.learning_rate", 2e-5), ("b", "grpo.temperature", 1.2)):
        fork_for_intervention(store, main, name, propose(store, main, field_path, value))
        candidates.append(BranchRef("demo", name))
        trained(store, candidates[-1], name)
        evaluate(store, candidates[-1], [0.75, 0.5, 0.5, 0.25] * 20)
    config = ExperimentConfig.parse({"name": "demo", "proposer": {"autonomy": "approve-promotions"}})
    loop = _Run(store, config, lambda line: None)
    with pytest.raises(DecisionPending) as stopped:
        loop._promote(candidates[0])
    request = stopped.value.request
    assert (request.subject, request.branch, request.details["candidate_score"]) == ("promotion", "demo/a", 0.5)
    assert str(stopped.value).startswith("waiting for a human: a promotion of demo/a: autonomy approve-promotions")
    record_decision(store, request.request_id, "aborted", note="one seed is not enough")
    vetoed = loop._promote(candidates[0]).payload
    assert vetoed["decision"] == "rejected" and vetoed["evidence"]["veto"] == {"by": "test",
                                                                                "note": "one seed is not enough"}
    assert vetoed["reason"] == "rejected: the gate would promote it, test aborted it (one seed is not enough)"
    decisions = gate_decisions(store, "demo")
    assert [d.payload["candidate"] for d in decisions] == ["demo/a"] and incumbent_of(store, "demo") == main
    assert not _last_verdict_inconclusive(decisions)  # a veto asks for no second look

    with pytest.raises(DecisionPending) as stopped:
        loop._promote(candidates[1])
    record_decision(store, stopped.value.request.request_id, "approved")
    assert loop._promote(candidates[1]).payload["decision"] == "promoted"
    assert incumbent_of(store, "demo") == candidates[1]
