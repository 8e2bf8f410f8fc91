"""The proposer interface: the changes a round tries, from the proposer the experiment names.

    proposals = round_proposals(store, config.proposer, context, say)

The `[proposer]` table (proposer_config.py) names a kind and its fallbacks, asked in order
until one gives a usable change: `rules` is the built-in rule engine (proposer.py), `llm`
a chat model (llm_proposer.py), `human` and `agent` a person or an agent answering a
DecisionRequested (gates.py) with `evotrainer approve|revise|abort` or their MCP tools.
Whatever a proposer that is not code says is recorded before anything acts on it (a
ProposerReplied, or the DecisionRecorded), under a key derived from the round (the best so
far and how many candidates came before), so a resumed run reads the recorded reply of
its round instead of asking again, and `replay` never asks at all. The rules are code: the
log they read gives the same list every time, so their lists are not recorded.

The rule engine's list always follows a usable change of another proposer when `rules` is
among the kinds: if the change was tried already or its backtest refutes it, the loop goes
on down the rules' list as it would without the other proposer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from evotrainer.events import DecisionRequested, ProposerReplied
from evotrainer.evolve.gates import decision_for, request_id
from evotrainer.evolve.proposer import Proposal
from evotrainer.evolve.proposer_config import ProposerConfig
from evotrainer.evolve.skills import SkillLibrary, trigger_for
from evotrainer.harness.spec import HarnessSpec
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, NewEvent, StoredEvent

Say = Callable[[str], None]
LLM_ATTEMPTS = 2
"""Asks of the model per round: the first, and one more showing it why its reply was refused."""


@dataclass(frozen=True)
class RoundContext:
    """What a proposer is shown in one round: all of it read from the log."""

    incumbent: BranchRef
    round: int
    """Candidates tried before this round: with the best so far, it names the round."""
    domain: str
    components: tuple[str, ...]
    spec: HarnessSpec
    conditions: list[str]
    diagnosis: dict[str, Any] | None
    library: SkillLibrary
    rules: list[Proposal]
    """The rule engine's list, best first."""
    outcomes: list[str] = field(default_factory=list)
    """One line per verdict so far: the candidate, its change, the gate's reason."""
    rejected_in_a_row: int = 0

    def key(self, what: str) -> str:
        return f"proposer:{self.incumbent}:{self.round}:{what}"


def round_proposals(store: EventStore, config: ProposerConfig, context: RoundContext, say: Say) -> list[Proposal]:
    """The changes to try this round, best first: the first usable change of the proposer
    and its fallbacks, then the rules' list when `rules` is among them. Raises
    gates.DecisionPending when a person must answer first."""
    kinds = (config.kind, *config.fallback)
    rules = context.rules if "rules" in kinds else []
    for kind in kinds:
        if kind == "rules":
            return rules
        found = _from_llm(store, config, context, say) if kind == "llm" else _from_person(store, kind, context)
        if found is not None:
            return [found, *[p for p in rules if (p.field, p.value) != (found.field, found.value)]]
    return []


def _from_llm(store: EventStore, config: ProposerConfig, context: RoundContext, say: Say) -> Proposal | None:
    from evotrainer.evolve.llm_proposer import Outcome, ask, parse_reply, prompt, retry_messages

    messages = prompt(context)
    for attempt in range(1, LLM_ATTEMPTS + 1):
        key = context.key(f"llm:{attempt}")
        recorded = _recorded_reply(store, context.incumbent, key)
        if recorded is None:
            reply = ask(config, messages)
            outcome = parse_reply(reply.text, context, str(config.model)) if reply.text is not None \
                else Outcome(None, f"no reply: {reply.error}")  # fmt: skip
            event = ProposerReplied(
                request_key=key, proposer="llm", model=config.model, attempt=attempt, messages=messages,
                reply=reply.text, proposal=outcome.parsed or None, accepted=outcome.proposal is not None,
                reason=outcome.reason, prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens,
                latency_s=round(reply.latency_s, 3),
            )  # fmt: skip
            recorded = store.append(context.incumbent, [NewEvent.of(event, idempotency_key=key)])[0]
            verdict = "accepted" if outcome.proposal is not None else f"refused: {outcome.reason}"
            say(f"{context.incumbent}: {config.model} replied in {reply.latency_s:.1f} s "
                f"(attempt {attempt}): {verdict}")  # fmt: skip
        p = recorded.payload
        if p["accepted"]:
            change = p["proposal"]
            return Proposal(change["field"], change["value"], change["hypothesis"],
                            trigger_for(context.conditions, change["field"]), change["criterion"], change["rollback"],
                            proposer=f"llm:{p['model']}", reply_id=recorded.event_id)  # fmt: skip
        if p["reply"] is None:
            return None  # the endpoint never answered (its retries are spent): fall back, do not ask again
        messages = retry_messages(messages, p["reply"], p["reason"])
    return None


def _recorded_reply(store: EventStore, branch: BranchRef, key: str) -> StoredEvent | None:
    return next((e for e in store.read_branch(branch) if e.type == "ProposerReplied"
                 and e.payload["request_key"] == key), None)  # fmt: skip


def _from_person(store: EventStore, kind: str, context: RoundContext) -> Proposal | None:
    """The change a person (or an agent) chose: the rules' first suggestion approved, or
    their own by revise; None when they aborted (the fallbacks are asked instead)."""
    suggestion = context.rules[0] if context.rules else None
    shown = None if suggestion is None else {"field": suggestion.field, "value": suggestion.value,
                                             "hypothesis": suggestion.hypothesis}  # fmt: skip
    request = DecisionRequested(
        request_id=request_id(context.incumbent.experiment, context.key(kind)), subject="proposal",
        branch=str(context.incumbent), why=f"the experiment's proposer is {kind}: approve the rules' suggestion, "
        "or revise it with your own change", proposal=shown,
        details={"conditions": context.conditions, "rules": [f"{p.field}={p.value!r}" for p in context.rules[:5]]},
    )  # fmt: skip
    answer = decision_for(store, request)
    return answered_proposal(answer, suggestion, kind, context.conditions)


def answered_proposal(
    answer: StoredEvent, suggestion: Proposal | None, proposer: str, conditions: list[str]
) -> Proposal | None:
    """The change a DecisionRecorded makes of the suggestion on the table: it (approved),
    the person's own (revised), or none (aborted). Either way the person chose it, and it
    goes to no other gate."""
    p = answer.payload
    if p["decision"] == "aborted":
        return None
    if p["decision"] == "approved":
        return None if suggestion is None else Proposal(
            suggestion.field, suggestion.value, suggestion.hypothesis, suggestion.trigger, suggestion.criterion,
            suggestion.rollback, proposer=proposer, reply_id=answer.event_id)  # fmt: skip
    (field_path, value), = p["changes"].items()
    return Proposal(field_path, value, p["note"] or "a human chose this change", trigger_for(conditions, field_path),
                    proposer=proposer, reply_id=answer.event_id)  # fmt: skip
