"""Execute an intervention: fork a branch that runs under the intervention's harness.

    forked = fork_for_intervention(store, BranchRef("demo", "main"), "lr-up", "iv-0123456789ab")

The new branch shares the source's history up to the fork point, and its first event
after BranchForked is the HarnessVersioned of the candidate spec (the base with the one
field changed), caused by the InterventionProposed (its causation id): that link is how
the promotion gate later knows which intervention a branch tested. Both events commit
together, or neither does.

An intervention whose latest backtest failed a clause of its criterion was dropped and
is not executed; one on a field a backtest can replay must have been backtested first.
A backtest that could check none of the criterion's clauses (a criterion only about the
gain after training) does not drop it. A change no backtest can replay (a learning rate)
is trained directly: the promotion gate is then its only check (METHOD.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from evotrainer.backtest.replay import NotBacktestableError, backtest_kind
from evotrainer.backtest.task import find_intervention
from evotrainer.errors import UsageError
from evotrainer.events import InterventionProposed
from evotrainer.harness.criterion import check_criterion
from evotrainer.harness.versions import harness_of, versioned_event
from evotrainer.lineage.provenance import from_work
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, StoredEvent


@dataclass(frozen=True)
class ForkedIntervention:
    """The new branch's first two events."""

    forked: StoredEvent
    harness: StoredEvent


def fork_for_intervention(
    store: EventStore, source: BranchRef, new_branch: str, intervention_id: str
) -> ForkedIntervention:
    """Fork `source` (at its seq, else its head) into `new_branch` running the candidate
    harness of `intervention_id`; UsageError (nothing written) when it may not run."""
    history = store.read_branch(source)
    # Fork exactly where the checks below looked: an append to the source in between
    # (another harness version) must not slip into the fork.
    source = BranchRef(source.experiment, source.branch, history[-1].seq)
    proposal, base = find_intervention(history, source.branch_ref, intervention_id)
    proposed = next(e for e in reversed(history) if e.type == "InterventionProposed"
                    and e.payload["intervention_id"] == intervention_id)  # fmt: skip
    current = harness_of(history)
    if current.address != base.address():
        raise UsageError(
            f"{source} runs under harness {current.address[:12]}, but intervention {intervention_id} changes "
            f"harness {base.address()[:12]}: fork from the point where that harness was current"
        )
    check_backtest(from_work(history), source, proposal)  # only a backtest that work produced clears it
    candidate = base.with_field(proposal.field, proposal.new_value)
    reason = f"intervention {intervention_id}: {proposal.field} -> {proposal.new_value!r}"
    with store.transaction():
        forked = store.fork(source, new_branch, reason)
        harness = store.append(BranchRef(source.experiment, new_branch), [versioned_event(
            candidate, base.address(), [proposal.field], causation_id=proposed.event_id)])[0]  # fmt: skip
    return ForkedIntervention(forked, harness)


CONTINUE_REASON = "continue: train the best so far further under its own harness"


def fork_to_continue(store: EventStore, source: BranchRef, new_branch: str) -> StoredEvent:
    """Fork `source` at its head into `new_branch`, which trains the source's newest policy
    further under the source's harness (no change): the candidate that answers "does more
    of the same still help?", judged by the gate like any other."""
    return store.fork(source, new_branch, CONTINUE_REASON)


def is_continuation(history: list[StoredEvent], ref: BranchRef) -> bool:
    """Whether the branch was forked by fork_to_continue."""
    return any(e.type == "BranchForked" and e.payload.get("reason") == CONTINUE_REASON
               and e.experiment == ref.experiment and e.branch == ref.branch for e in history)  # fmt: skip


def is_second_look(history: list[StoredEvent], ref: BranchRef) -> bool:
    """Whether the branch only changed how policies are measured (`evaluation.*` fields)
    of a branch that trained: it judges its source's trained policy again under the new
    protocol and trains nothing itself (retraining would reproduce the same policy at
    the cost of a chunk of the budget)."""
    own = [e for e in history if e.experiment == ref.experiment and e.branch == ref.branch]
    changed = [f for e in own if e.type == "HarnessVersioned" for f in e.payload.get("changed_fields", [])]
    measured_only = bool(changed) and all(field.startswith("evaluation.") for field in changed)
    return measured_only and any(e.type == "RolloutsRecorded" for e in history)


def check_backtest(history: list[StoredEvent], source: BranchRef, proposal: InterventionProposed) -> None:
    """Refuse an intervention that failed its backtest, or one that could have had a
    backtest and has none."""
    ident = proposal.intervention_id
    backtests = [e for e in history if e.type == "BacktestCompleted" and e.payload["intervention_id"] == ident]
    try:
        backtest_kind(proposal.field)
    except NotBacktestableError:
        if not backtests:
            return  # nothing can be checked before training: the promotion gate decides
    if not backtests:
        raise UsageError(
            f"intervention {ident} has no backtest on {source.branch_ref}: run `evotrainer backtest "
            f"{source.branch_ref} {ident}` first (a change that stored evidence can judge is judged before training)"
        )
    failed = backtest_failures(backtests[-1], proposal.success_criterion)
    if failed:
        raise UsageError(
            f"intervention {ident} failed its backtest at {source.branch_ref}@{backtests[-1].seq} "
            f"({'; '.join(failed)}): it is dropped, not trained"
        )


def backtest_failures(backtest: StoredEvent, criterion: str) -> list[str]:
    """The clauses of the criterion a BacktestCompleted's figures refute (empty: none)."""
    text = backtest.payload.get("criterion") or criterion
    return list(check_criterion(text, backtest.payload.get("figures", {})).failed)
