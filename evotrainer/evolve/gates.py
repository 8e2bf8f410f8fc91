"""Human gates: where the loop stops until a person (or an agent) approves, revises or aborts.

    decision = decision_for(store, request)          # the recorded answer, or DecisionPending
    pending(store, "math-tiny")                      # requests nobody answered yet
    record_decision(store, "d-0123456789", "approved", note="looks right")

A request is a DecisionRequested on EXPERIMENT/main whose id is derived from what it asks
(the round, the intervention, the candidate), so a resumed run asks the same question
under the same id instead of a new one, and finds the answer once it is recorded. The
answer is a DecisionRecorded, once per request, by whoever ran the command (the store's
actor: EVOTRAINER_ACTOR, `--actor`, or the OS user).

When the loop meets an unanswered request it raises DecisionPending, whose exit status (4)
tells a script that nothing failed: a human is needed, and `evotrainer run` resumes from
the answer.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Literal

from evotrainer.errors import EvotrainerError, NotFoundError, UsageError
from evotrainer.events import DecisionRecorded, DecisionRequested, InterventionProposed
from evotrainer.evolve.promotion import DECISIONS_BRANCH, PromotionDecision
from evotrainer.evolve.proposer_config import ProposerConfig
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, NewEvent, StoredEvent

Decision = Literal["approved", "revised", "aborted"]


class DecisionPending(EvotrainerError):
    """The loop stopped at a human gate: `request` waits for approve, revise or abort."""

    exit_code = 4

    def __init__(self, request: DecisionRequested) -> None:
        self.request = request
        what = describe(request)
        super().__init__(
            f"waiting for a human: {what} (request {request.request_id}); decide with "
            f"`evotrainer approve {request.request_id}`, `evotrainer revise {request.request_id} --set FIELD=VALUE` "
            f"or `evotrainer abort {request.request_id}`, then run again to resume"
        )


def describe(request: DecisionRequested | Mapping[str, Any]) -> str:
    """One line: what waits, on which branch, and why."""
    p = request.model_dump() if isinstance(request, DecisionRequested) else request
    change = p.get("proposal") or {}
    shown = f" {change['field']} -> {change['value']!r}" if change.get("field") else ""
    verbs = {"proposal": "a change to propose for", "intervention": "intervention" + shown + " to run on",
             "promotion": "a promotion of"}  # fmt: skip
    lead = f"{verbs[p['subject']]} {p['branch']}"
    if p["subject"] == "proposal" and shown:
        lead += f" (the rules suggest{shown})"
    return f"{lead}: {p['why']}"


def request_id(experiment: str, key: str) -> str:
    """A short id a person can type, the same each time the loop asks the same question."""
    return "d-" + hashlib.sha256(f"{experiment}\0{key}".encode()).hexdigest()[:10]


def decision_for(store: EventStore, request: DecisionRequested) -> StoredEvent:
    """The recorded answer to `request` (a DecisionRecorded); otherwise record the request
    (once) and raise DecisionPending."""
    experiment = BranchRef.parse(request.branch, allow_seq=False).experiment
    main = BranchRef(experiment, DECISIONS_BRANCH)
    for event in store.read_branch(main):
        if event.type == "DecisionRecorded" and event.payload["request_id"] == request.request_id:
            return event
    store.append(main, [NewEvent.of(request, idempotency_key=f"decision-request:{request.request_id}")])
    raise DecisionPending(request)


def needs_approval(config: ProposerConfig, proposed_by: str, rejected_in_a_row: int) -> bool:
    """Whether a person must approve an intervention before it runs: always under
    `approve-interventions`, and under `escalate-after-N` once N versions in a row were
    rejected (METHOD.md: after repeated failures, human-gated mode). A change a person (or
    an agent) chose goes to no gate again."""
    if proposed_by in ("human", "agent"):
        return False
    escalate = config.escalate_after
    return config.autonomy == "approve-interventions" or (escalate is not None and rejected_in_a_row >= escalate)


def intervention_answer(
    store: EventStore, config: ProposerConfig, incumbent: BranchRef, proposed: InterventionProposed,
    rejected_in_a_row: int, backtest: dict[str, Any] | None,
) -> StoredEvent:
    """The recorded answer about forking and training `proposed`; DecisionPending until
    there is one. The request shows the change, its criterion and its backtest's figures."""
    why = f"autonomy {config.autonomy}: " + ("every intervention waits" if config.autonomy == "approve-interventions"
                                              else f"{rejected_in_a_row} versions in a row were rejected")  # fmt: skip
    request = DecisionRequested(
        request_id=request_id(incumbent.experiment, f"intervention:{incumbent}:{proposed.intervention_id}"),
        subject="intervention", branch=str(incumbent), why=why,
        proposal={"field": proposed.field, "value": proposed.new_value, "hypothesis": proposed.hypothesis,
                  "intervention_id": proposed.intervention_id, "proposer": proposed.proposer},
        details={"old_value": proposed.old_value, "criterion": proposed.success_criterion, "backtest": backtest},
    )  # fmt: skip
    return decision_for(store, request)


def promotion_answer(store: EventStore, candidate: BranchRef, decision: PromotionDecision) -> StoredEvent:
    """The recorded answer about a promotion the gate decided; DecisionPending until there is one."""
    d = decision.decided
    request = DecisionRequested(
        request_id=request_id(candidate.experiment, f"promotion:{candidate}"), subject="promotion",
        branch=str(candidate), why="autonomy approve-promotions: the gate would promote it",
        details={"reason": d.reason, "candidate_score": d.candidate_score, "baseline_score": d.baseline_score,
                 "margin": d.margin, "incumbent": str(decision.incumbent)},
    )  # fmt: skip
    return decision_for(store, request)


def vetoed(decision: PromotionDecision, answer: StoredEvent) -> NewEvent:
    """A promotion a person aborted, as the gate's rejection: under the key the gate derives
    from its evidence (so promotion.judged_by_the_gate counts it), naming who and why, with
    no skill outcome (a veto says nothing of what the change did)."""
    note = answer.payload["note"]
    d = decision.decided
    rejected = d.model_copy(update={
        "decision": "rejected", "evidence": {**d.evidence, "veto": {"by": answer.actor, "note": note}},
        "reason": f"rejected: the gate would promote it, {answer.actor} aborted it{f' ({note})' if note else ''}",
    })  # fmt: skip
    return NewEvent.of(rejected, idempotency_key=decision.idempotency_key, causation_id=answer.event_id)


def pending(store: EventStore, experiment: str | None = None) -> list[StoredEvent]:
    """Requests with no recorded answer, oldest first (every experiment's by default)."""
    names = [experiment] if experiment else sorted({info.experiment for info in store.branches()})
    return [e for name in names for e in open_requests(store.read_branch(BranchRef(name, DECISIONS_BRANCH)))]


def open_requests(decisions: list[StoredEvent]) -> list[StoredEvent]:
    """The DecisionRequested events of one decisions branch's history that no
    DecisionRecorded answers, oldest first."""
    answered = {e.payload["request_id"] for e in decisions if e.type == "DecisionRecorded"}
    return [e for e in decisions if e.type == "DecisionRequested" and e.payload["request_id"] not in answered]


def find_request(store: EventStore, ident: str) -> tuple[StoredEvent, StoredEvent | None]:
    """The request with this id and its answer (None while it waits)."""
    for name in sorted({info.experiment for info in store.branches()}):
        events = store.read_branch(BranchRef(name, DECISIONS_BRANCH))
        asked = next((e for e in events if e.type == "DecisionRequested" and e.payload["request_id"] == ident), None)
        if asked is not None:
            answer = next((e for e in events if e.type == "DecisionRecorded" and e.payload["request_id"] == ident),
                          None)  # fmt: skip
            return asked, answer
    raise NotFoundError(f"no decision request {ident}: `evotrainer pending` lists the open ones")


def record_decision(
    store: EventStore, ident: str, decision: Decision, *, changes: Mapping[str, Any] | None = None, note: str = "",
    actor: str | None = None,
) -> StoredEvent:
    """Answer a request as `actor` (default: the store's). A revision must be one valid
    change of the harness the request is about (checked as `evotrainer propose` checks
    one); nothing is written when it is not, or when the request was answered already."""
    asked, answer = find_request(store, ident)
    if answer is not None:
        raise UsageError(f"request {ident} was {answer.payload['decision']} already, by {answer.actor} "
                         f"at {answer.recorded_at:%Y-%m-%d %H:%M:%S}")  # fmt: skip
    if decision == "revised":
        check_revision(store, asked.payload, dict(changes or {}), note)
    elif changes:
        raise UsageError("--set goes with `evotrainer revise` only")
    recorded = DecisionRecorded(request_id=ident, decision=decision, changes=dict(changes or {}), note=note)
    main = BranchRef(asked.experiment, DECISIONS_BRANCH)
    answered = NewEvent.of(recorded, idempotency_key=f"decision:{ident}", causation_id=asked.event_id, actor=actor)
    return store.append(main, [answered])[0]


def check_revision(store: EventStore, request: Mapping[str, Any], changes: dict[str, Any], note: str) -> None:
    """Refuse a revision the loop could not run: of a promotion (approve or abort it), or
    not exactly one valid change of the branch's harness."""
    from evotrainer.evolve.proposer import check_proposable
    from evotrainer.harness.intervention import design_intervention
    from evotrainer.harness.versions import branch_harness

    if request["subject"] == "promotion":
        raise UsageError("a promotion is approved or aborted, not revised: revise changes a proposal or an "
                         "intervention")  # fmt: skip
    spec = branch_harness(store, BranchRef.parse(request["branch"], allow_seq=False)).spec
    if len(changes) == 1:
        check_proposable(next(iter(changes)))
    designed = design_intervention(spec, changes, hypothesis=note or "a human chose this change", proposer="human")
    designed.candidate.to_grpo_settings()
