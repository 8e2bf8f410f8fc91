"""The LLM proposer: one single-field change asked of any OpenAI-compatible chat endpoint.

    messages = prompt(context)                       # diagnosis, harness, skills, history
    reply = ask(config, messages)                    # text, tokens, latency (or the error)
    proposal = parse_reply(reply.text, context)      # validated like `evotrainer propose`

The prompt holds what a human trainer would look at: the diagnosis of the best so far's
run, its harness (the fields a proposal may change, and the ones it may not), the skill
library's record, the interventions tried so far with their verdicts, and the rule engine's
own suggestions. The model answers with one JSON object (REPLY_SCHEMA); the reply is checked
exactly as a hand-made proposal is (harness.intervention.design_intervention), so a reply
that names several fields, changes nothing, or gives an uncheckable criterion is refused
with the reason, which the caller records and shows the model once more.

Transport failures (timeouts, 429 rate limits, 5xx, refused connections) are retried by
the `openai` client with exponential backoff (it honours Retry-After); past `max_retries`
the reply is an error, never an exception: the run falls back to the next proposer.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from evotrainer.errors import UsageError
from evotrainer.evolve.proposer import PROPOSABLE_SECTIONS, Proposal, check_proposable
from evotrainer.evolve.proposer_config import ProposerConfig
from evotrainer.evolve.skills import trigger_for
from evotrainer.harness.intervention import MultiFieldInterventionError, design_intervention
from evotrainer.harness.spec import leaves

if TYPE_CHECKING:
    from evotrainer.evolve.proposing import RoundContext

REPLY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "field": {"type": "string", "description": "the one dotted harness field to change"},
        "value": {"description": "its new value (a number, true/false or a string)"},
        "hypothesis": {"type": "string", "description": "if X changes, Y improves because Z"},
        "criterion": {"type": "string", "description": "METRIC OP NUMBER [and ...], e.g. avg_at_k_gain >= 0.01"},
        "rollback": {"type": "string", "description": "how to undo it"},
    },
    "required": ["field", "value", "hypothesis"],
    "additionalProperties": False,
}
_SYSTEM = f"""You are the trainer of a GRPO reinforcement-learning run. You improve its training
harness one change at a time, from evidence. Propose exactly ONE change to ONE field under
{", ".join(s + "." for s in PROPOSABLE_SECTIONS)} (fields elsewhere are frozen for you). Reply with one JSON
object and nothing else, matching this JSON schema:
{json.dumps(REPLY_SCHEMA)}
The criterion is falsifiable and machine-checkable: clauses METRIC OP NUMBER joined by "and", over
avg_at_k_gain (after training) or backtest figures (dead_groups_rescued, ordering_violations_introduced,
wrong_rewarded_removed, correct_cut_fraction, effective_data_fraction). Leave it out for the default."""


@dataclass(frozen=True)
class Reply:
    """What came back from one ask: the text, or the error that ended the retries."""

    text: str | None
    latency_s: float
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class Outcome:
    """A reply judged: the proposal it makes, or why it makes none."""

    proposal: Proposal | None
    reason: str = ""
    parsed: dict[str, Any] = field(default_factory=dict)


def prompt(context: RoundContext) -> list[dict[str, str]]:
    """The chat messages for one round (deterministic in the round's context)."""
    spec = context.spec.to_json()
    lines = [f"Domain: {context.domain}. Best so far: {context.incumbent}."]
    lines.append(f"Diagnosed conditions: {', '.join(context.conditions) or 'none'}.")
    for finding in (context.diagnosis or {}).get("findings", []):
        if finding.get("severity") != "info":
            lines.append(f"- {finding['layer']} {finding['metric']} = {finding.get('value')} "
                         f"({finding['severity']}): {finding.get('message', '')}")  # fmt: skip
    lines.append("Harness fields you may change (field = value):")
    lines += [f"  {path} = {json.dumps(value)}" for section in PROPOSABLE_SECTIONS
              for path, value in leaves(spec[section], section)]  # fmt: skip
    components = [c for c in context.components if c not in context.spec.rewards.weights]
    if components:
        lines.append(f"Reward components the domain reports that the harness does not weigh yet: "
                     f"{', '.join(components)} (set rewards.weights.NAME to use one).")  # fmt: skip
    lines.append(f"Frozen (not yours): {', '.join(s for s in sorted(spec) if s not in PROPOSABLE_SECTIONS)}.")
    skills = list(context.library.skills.values())
    lines.append("Skill library (trigger / field / direction: successes-failures, mean effect):"
                 if skills else "Skill library: empty.")  # fmt: skip
    lines += [f"  {s.trigger} / {s.field_path} / {s.way}: {s.successes}-{s.failures}, {s.mean_effect}" for s in skills]
    lines.append("Interventions tried so far and their verdicts:" if context.outcomes else "Nothing tried yet.")
    lines += [f"  {o}" for o in context.outcomes]
    if context.rejected_in_a_row:
        lines.append(f"{context.rejected_in_a_row} versions in a row were rejected: consider a subtraction or "
                     "another layer.")  # fmt: skip
    lines.append("The rule engine would try, in order: "
                 + "; ".join(f"{p.field} = {json.dumps(p.value)}" for p in context.rules[:5]) + ".")  # fmt: skip
    lines.append("Your one change, as JSON:")
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": "\n".join(lines)}]


def retry_messages(messages: Sequence[Mapping[str, str]], reply: str | None, reason: str) -> list[dict[str, str]]:
    """The conversation again, with the refused reply and why it was refused."""
    return [*map(dict, messages), {"role": "assistant", "content": reply or ""},
            {"role": "user", "content": f"That reply was refused: {reason}. Reply with one corrected JSON object."}]


def ask(config: ProposerConfig, messages: Sequence[Mapping[str, str]]) -> Reply:
    """One chat completion. Every transport failure ends as Reply.error, never as an exception."""
    import openai

    client = openai.OpenAI(base_url=config.base_url, api_key=config.api_key(), timeout=config.timeout_s,
                           max_retries=config.max_retries)  # fmt: skip
    started = time.monotonic()
    try:
        response = client.chat.completions.create(
            model=str(config.model), messages=list(messages),  # type: ignore[arg-type]
            temperature=config.temperature, max_tokens=config.max_tokens,
        )  # fmt: skip
    except openai.APIError as exc:
        return Reply(None, time.monotonic() - started, error=f"{type(exc).__name__}: {_first_line(exc)}")
    finally:
        client.close()
    latency = time.monotonic() - started
    usage = response.usage
    choices = response.choices or []
    text = choices[0].message.content if choices else None
    prompt_tokens, completion_tokens = (usage.prompt_tokens, usage.completion_tokens) if usage else (None, None)
    if text is None:
        return Reply(None, latency, prompt_tokens, completion_tokens, error="the reply had no message content")
    return Reply(text, latency, prompt_tokens, completion_tokens)


def parse_reply(text: str, context: RoundContext, model: str) -> Outcome:
    """The proposal a reply makes, validated like a hand-made one; or why it makes none."""
    try:
        body = _json_object(text)
        changes = _changes(body)
        if len(changes) != 1:
            _refuse_several(changes)
        check_proposable(next(iter(changes)))
        hypothesis = body.get("hypothesis")
        if not isinstance(hypothesis, str):
            raise UsageError("the reply has no hypothesis (a string: if X changes, Y improves because Z)")
        criterion, rollback = (_optional_text(body, key) for key in ("criterion", "rollback"))
        designed = design_intervention(context.spec, changes, hypothesis=hypothesis, success_criterion=criterion,
                                       rollback_plan=rollback, proposer=f"llm:{model}")  # fmt: skip
        designed.candidate.to_grpo_settings()  # a harness that cannot train is no proposal
    except UsageError as exc:
        return Outcome(None, str(exc))
    e = designed.event
    proposal = Proposal(e.field, e.new_value, e.hypothesis, trigger_for(context.conditions, e.field),
                        criterion=e.success_criterion, rollback=e.rollback_plan, proposer=e.proposer)  # fmt: skip
    return Outcome(proposal, parsed={"field": e.field, "value": e.new_value, "hypothesis": e.hypothesis,
                                     "criterion": e.success_criterion, "rollback": e.rollback_plan})  # fmt: skip


def _json_object(text: str) -> dict[str, Any]:
    """The reply's JSON object; models often wrap it in a ``` fence, which is allowed."""
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, re.DOTALL)
    try:
        body = json.loads(fenced.group(1) if fenced else text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"the reply is not JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(body, dict):
        raise UsageError(f"the reply is JSON but not an object: {text.strip()[:80]}")
    return body


def _changes(body: dict[str, Any]) -> dict[str, Any]:
    """{field: value}. A reply that names several fields (a list of fields, or a `changes`
    object) is passed on so that design_intervention refuses it by name."""
    if isinstance(body.get("changes"), dict):
        return dict(body["changes"])
    unknown = sorted(set(body) - set(REPLY_SCHEMA["properties"]))
    if unknown:
        raise UsageError(f"the reply has fields the schema does not: {', '.join(unknown)}")
    name = body.get("field")
    if isinstance(name, list) and all(isinstance(n, str) for n in name):
        raise MultiFieldInterventionError(name)
    if not isinstance(name, str) or "value" not in body:
        raise UsageError("the reply must name one `field` (a dotted path, e.g. grpo.temperature) and its `value`")
    return {name: body["value"]}


def _refuse_several(changes: dict[str, Any]) -> None:
    if not changes:
        raise UsageError("the reply changes nothing: name one field and its value")
    raise MultiFieldInterventionError(sorted(changes))


def _optional_text(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if not isinstance(value, str):
        raise UsageError(f"the reply's {key} must be a string")
    return value


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:300]
