"""Executing an intervention: a fork that runs the candidate harness, linked to its proposal,
and only for an intervention that did not fail its backtest."""

from __future__ import annotations

import pytest

from evotrainer.errors import AlreadyExistsError, UsageError
from evotrainer.evolve import fork_for_intervention
from evotrainer.harness import HarnessSpec
from evotrainer.harness.versions import branch_harness, versioned_event
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore
from tests.evolve.builders import backtest, propose, start

REWARD_FIELD = "rewards.weights.format"  # a backtest can replay it


def branch_names(store: EventStore) -> list[str]:
    return sorted(info.name for info in store.branches("demo"))


def test_the_fork_runs_the_candidate_harness_caused_by_the_proposal(store: EventStore) -> None:
    main = start(store)
    iid = propose(store, main, "grpo.learning_rate", 2e-5)
    forked = fork_for_intervention(store, main, "lr-up", iid)
    lr = BranchRef("demo", "lr-up")
    proposal = next(e for e in store.read_branch(main) if e.type == "InterventionProposed")
    assert forked.harness.causation_id == proposal.event_id
    assert forked.harness.payload["parent_hash"] == HarnessSpec().address()
    assert forked.harness.payload["changed_fields"] == ["grpo.learning_rate"]
    assert branch_harness(store, lr).spec.grpo.learning_rate == 2e-5
    assert branch_harness(store, main).spec == HarnessSpec()
    assert f"intervention {iid}" in forked.forked.payload["reason"]
    assert [e.type for e in store.read_branch(lr)][-2:] == ["BranchForked", "HarnessVersioned"]


def test_a_replayable_change_needs_a_backtest_and_a_failed_one_is_dropped(store: EventStore) -> None:
    main = start(store)
    iid = propose(store, main, REWARD_FIELD, 0.2)
    with pytest.raises(UsageError, match=f"no backtest on demo/main: run `evotrainer backtest demo/main {iid}`"):
        fork_for_intervention(store, main, "fmt", iid)
    backtest(store, main, iid, {"dead_groups_rescued": 0, "ordering_violations_introduced": 0}, passed=False)
    with pytest.raises(UsageError, match=r"failed its backtest at demo/main@\d+ \(dead_groups_rescued >= 1\)"):
        fork_for_intervention(store, main, "fmt", iid)
    assert branch_names(store) == ["main"]  # nothing written
    backtest(store, main, iid, {"dead_groups_rescued": 3, "ordering_violations_introduced": 0}, passed=True,
             evidence="newer evidence")
    fork_for_intervention(store, main, "fmt", iid)
    assert branch_harness(store, BranchRef("demo", "fmt")).spec.rewards.weights["format"] == 0.2


def test_a_branch_whose_harness_moved_on_is_refused(store: EventStore) -> None:
    main = start(store)
    iid = propose(store, main, "grpo.learning_rate", 2e-5)
    proposed_at = store.head(main)[0]
    moved = HarnessSpec().with_field("grpo.temperature", 1.3)
    store.append(main, [versioned_event(moved, HarnessSpec().address(), ["grpo.temperature"])])
    with pytest.raises(UsageError, match="fork from the point where that harness was current"):
        fork_for_intervention(store, main, "lr", iid)
    forked = fork_for_intervention(store, BranchRef("demo", "main", proposed_at), "lr", iid)  # at the proposal
    assert forked.forked.payload["fork_seq"] == proposed_at
    assert branch_harness(store, BranchRef("demo", "lr")).spec.grpo.temperature == 1.0


def test_an_unknown_intervention_or_a_taken_name_writes_nothing(store: EventStore) -> None:
    main = start(store)
    iid = propose(store, main, "grpo.learning_rate", 2e-5)
    with pytest.raises(UsageError, match="no intervention 'iv-nope' on demo/main; proposed there: iv-"):
        fork_for_intervention(store, main, "x", "iv-nope")
    fork_for_intervention(store, main, "lr", iid)
    head = store.head(BranchRef("demo", "lr"))
    with pytest.raises(AlreadyExistsError):
        fork_for_intervention(store, main, "lr", iid)
    assert store.head(BranchRef("demo", "lr")) == head and branch_names(store) == ["lr", "main"]
