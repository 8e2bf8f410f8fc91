"""The LLM proposer against a real chat-completions server on loopback (tests/evolve/chat_server.py),
through the `openai` client: every reply recorded before it is used, refused replies shown
to the model once and then the rules, transport failures retried, and a round asked again
(a resumed run) read from the record without a second request."""

from __future__ import annotations

import dataclasses
import json
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evotrainer.domains import get_domain
from evotrainer.errors import UsageError
from evotrainer.evolve.controller import _Run, run_experiment
from evotrainer.evolve.experiment_config import ExperimentConfig
from evotrainer.evolve.llm_proposer import parse_reply
from evotrainer.evolve.promotion import newest_policy
from evotrainer.evolve.proposer import builtin_proposals
from evotrainer.evolve.proposer_config import ProposerConfig
from evotrainer.evolve.proposing import RoundContext, round_proposals
from evotrainer.evolve.skills import SkillLibrary
from evotrainer.harness import HarnessSpec
from evotrainer.harness.versions import versioned_event
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, StoredEvent
from tests.evolve.chat_server import ChatServer, reply, slow, status

DOMAIN = "math:digit_add"
GOOD = json.dumps({"field": "grpo.temperature", "value": 1.3, "criterion": "avg_at_k_gain >= 0.01",
                   "hypothesis": "if sampling is hotter, completions in a group differ, because the policy is narrow",
                   "rollback": "revert grpo.temperature to 1.0"})  # fmt: skip


def llm(server: ChatServer, **settings: object) -> ProposerConfig:
    return ProposerConfig.model_validate({"kind": "llm", "base_url": server.base_url, "model": "scripted",
                                          "timeout_s": 5.0, "max_retries": 2, **settings})  # fmt: skip


def round_context(store: EventStore) -> RoundContext:
    store.create_experiment("ask")
    main = BranchRef("ask", "main")
    spec = HarnessSpec()
    store.append(main, [versioned_event(spec)])
    components = tuple(get_domain(DOMAIN).proposable_components)
    rules = builtin_proposals(spec, [], DOMAIN, components)
    return RoundContext(main, 0, DOMAIN, components, spec, [], None, SkillLibrary({}), rules)


def replies(store: EventStore) -> list[StoredEvent]:
    return [e for e in store.read_branch(BranchRef("ask", "main")) if e.type == "ProposerReplied"]


def test_a_good_reply_is_recorded_with_its_cost_and_asked_again_is_read_from_the_record(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    context = round_context(store)
    lines: list[str] = []
    monkeypatch.setenv("LLM18_TEST_KEY", "sk-from-the-environment")
    with ChatServer([reply(GOOD)]) as server:
        keyed = llm(server, api_key_env="LLM18_TEST_KEY")
        proposals = round_proposals(store, keyed, context, lines.append)
        (recorded,) = replies(store)
        again = round_proposals(store, keyed, context, lines.append)  # a resumed run's round
        assert len(server.requests) == 1
        assert server.requests[0]["authorization"] == "Bearer sk-from-the-environment"
    first = proposals[0]
    assert (first.field, first.value, first.proposer, first.reply_id) == (
        "grpo.temperature", 1.3, "llm:scripted", recorded.event_id)
    assert first.criterion == "avg_at_k_gain >= 0.01" and first.rollback == "revert grpo.temperature to 1.0"
    assert proposals[1:] == context.rules and again == proposals  # the rules follow, as the fallback
    p = recorded.payload
    assert (p["accepted"], p["reply"], p["attempt"], p["model"], p["reason"]) == (True, GOOD, 1, "scripted", "")
    assert p["proposal"]["field"] == "grpo.temperature" and p["latency_s"] >= 0
    assert p["prompt_tokens"] > 100 and p["completion_tokens"] > 10
    # The prompt shows the harness a proposal may change and what is frozen; it is what was sent.
    sent = server.requests[0]["messages"]
    assert p["messages"] == sent and "grpo.temperature = 1.0" in sent[1]["content"]
    assert "Frozen (not yours): diagnostics, evaluation, promotion" in sent[1]["content"]
    assert lines == ["ask/main: scripted replied in " + lines[0].split(" in ")[1].split(" ")[0] + " s (attempt 1): accepted"]


MULTI = json.dumps({"changes": {"grpo.temperature": 1.3, "grpo.beta": 0.04}, "hypothesis": "both at once"})


@pytest.mark.parametrize("bad, reason", [
    ("Raise the temperature, I think.", "the reply is not JSON"),
    (MULTI, "changes exactly one harness field; this one changes 2: grpo.beta, grpo.temperature"),
    (json.dumps({"field": ["grpo.beta", "grpo.temperature"], "value": 0.1, "hypothesis": "h"}), "changes 2"),
    (json.dumps({"field": "promotion.min_margin", "value": 0.0, "hypothesis": "h"}), "not a proposer's to change"),
    (json.dumps({"field": "grpo.learning_rate", "value": 5, "hypothesis": "h"}), "learning_rate"),
    (json.dumps({"field": "grpo.temperature", "value": 1.0, "hypothesis": "h"}), "changes nothing"),
    (json.dumps({"field": "grpo.temperature", "value": 1.2, "hypothesis": "h", "criterion": "it improves"}),
     "cannot check success criterion"),
    (json.dumps({"field": "grpo.temperature", "value": 1.2}), "no hypothesis"),
])  # fmt: skip
def test_a_refused_reply_is_recorded_with_the_reason_and_shown_to_the_model_once(
    store: EventStore, bad: str, reason: str
) -> None:
    context = round_context(store)
    with ChatServer([reply(bad), reply(GOOD)]) as server:
        proposals = round_proposals(store, llm(server), context, lambda line: None)
        assert len(server.requests) == 2
    refused, accepted = replies(store)
    assert (refused.payload["accepted"], refused.payload["reply"], refused.payload["proposal"]) == (False, bad, None)
    assert reason in refused.payload["reason"]
    # The retry carries the refused reply and why it was refused.
    retry = server.requests[1]["messages"]
    assert retry[-2] == {"role": "assistant", "content": bad} and reason in retry[-1]["content"]
    assert accepted.payload["accepted"] and accepted.payload["attempt"] == 2
    assert proposals[0].field == "grpo.temperature" and proposals[0].reply_id == accepted.event_id


def test_refused_twice_falls_back_to_the_rules_and_a_resumed_round_asks_nothing(store: EventStore) -> None:
    context = round_context(store)
    with ChatServer([reply("no idea"), reply(MULTI)]) as server:
        proposals = round_proposals(store, llm(server), context, lambda line: None)
        assert round_proposals(store, llm(server), context, lambda line: None) == proposals
        assert len(server.requests) == 2
    assert proposals == context.rules
    assert [e.payload["accepted"] for e in replies(store)] == [False, False]
    # With no fallback the round has nothing to try.
    fresh = dataclasses.replace(context, round=1)
    with ChatServer([reply("no idea")]) as server:
        assert round_proposals(store, llm(server, fallback=[]), fresh, lambda line: None) == []


def test_timeouts_and_rate_limits_are_retried_with_backoff(store: EventStore) -> None:
    context = round_context(store)
    with ChatServer([slow(2.0, GOOD), status(429), reply(GOOD)]) as server:
        proposals = round_proposals(store, llm(server, timeout_s=0.5, max_retries=3), context, lambda line: None)
        assert len(server.requests) == 3  # timed out, rate-limited, answered
    (recorded,) = replies(store)
    assert recorded.payload["accepted"] and recorded.payload["latency_s"] >= 0.5
    assert proposals[0].field == "grpo.temperature"


def test_an_endpoint_that_never_answers_is_recorded_and_the_rules_take_over(store: EventStore) -> None:
    context = round_context(store)
    with ChatServer([status(503)]) as server:
        proposals = round_proposals(store, llm(server, max_retries=1), context, lambda line: None)
        assert len(server.requests) == 2  # the first try and one retry; no retry showing an error
    (failed,) = replies(store)
    assert failed.payload["reply"] is None and failed.payload["reason"].startswith("no reply: InternalServerError")
    assert proposals == context.rules
    # Nothing listening at all: the connection error is recorded the same way.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    closed = ProposerConfig.model_validate({"kind": "llm", "base_url": f"http://127.0.0.1:{port}/v1",
                                            "model": "m", "max_retries": 0, "timeout_s": 2.0})  # fmt: skip
    fresh = dataclasses.replace(context, round=1)
    assert round_proposals(store, closed, fresh, lambda line: None) == context.rules
    assert replies(store)[-1].payload["reason"].startswith("no reply: APIConnectionError")


def test_a_key_variable_the_environment_lacks_is_refused_before_anything_is_written(store: EventStore) -> None:
    config = ExperimentConfig.parse({"name": "keyless", "proposer": {
        "kind": "llm", "base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key_env": "LLM18_NO_SUCH_KEY"}})
    with pytest.raises(UsageError, match="api_key_env names LLM18_NO_SUCH_KEY, which is not set"):
        run_experiment(store, config)
    assert store.branches() == []


TINY = {"grpo": {"max_steps": 2, "num_generations": 4, "prompts_per_step": 2},
        "evaluation": {"k": 2, "eval_tasks": 4}}  # fmt: skip


class Crash(Exception):
    """Stands for the controller being killed."""


@pytest.mark.slow
def test_a_run_trains_the_models_change_and_resumed_after_a_kill_asks_nothing(store: EventStore) -> None:
    """The model is asked, its reply recorded, and the run killed before it acts on it: the
    resumed run reads the recorded reply (no second request), forks the model's change,
    trains it and has the gate judge it. The start's continuation is held (a branch of its
    name that is no candidate) so that round 1 goes straight to a change."""
    proposed = json.dumps({"field": "grpo.learning_rate", "value": 0.002,
                           "hypothesis": "if the step size doubles, Avg@k rises, because 2 steps barely move it"})
    with ChatServer([reply(proposed)]) as server:
        config = ExperimentConfig.parse({"name": "loop", "iterations": 1, "harness": TINY, "proposer": {
            "kind": "llm", "base_url": server.base_url, "model": "scripted", "timeout_s": 30}})  # fmt: skip
        main = _Run(store, config, lambda line: None).start()
        store.fork(main, f"continue-{(newest_policy(store.read_branch(main)) or '')[:10]}", "held by the test")

        def killed_once_the_reply_is_recorded(line: str) -> None:
            if "scripted replied" in line:
                raise Crash

        with pytest.raises(Crash):
            run_experiment(store, config, killed_once_the_reply_is_recorded)
        assert not [info for info in store.branches("loop") if info.name.startswith("learning-rate")]
        summary = run_experiment(store, config)
        assert len(server.requests) == 1 and summary.candidates == 1
    candidate = next(info.ref for info in store.branches("loop") if info.name.startswith("learning-rate-raise"))
    history = store.read_branch(candidate)
    (replied,) = [e for e in history if e.type == "ProposerReplied"]
    intervention = next(e for e in history if e.type == "InterventionProposed")
    assert replied.payload["accepted"] and replied.position < intervention.position
    assert intervention.causation_id == replied.event_id
    assert (intervention.payload["proposer"], intervention.payload["new_value"]) == ("llm:scripted", 0.002)
    assert any(e.type == "TrainingCompleted" for e in history if e.branch == candidate.branch)
    decided = [e for e in store.read_branch(main) if e.type == "PromotionDecided"]
    assert [d.payload["candidate"] for d in decided] == [str(candidate)]


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                     max_leaves=6)  # fmt: skip
_FIELDS = st.sampled_from(["grpo.temperature", "grpo.beta", "rewards.weights.format", "rewards.weights", "grpo",
                           "filters.levels", "evaluation.k", "promotion.min_margin", "nope.x", ""]) | st.text(max_size=12)
_REPLIES = st.text(max_size=120) | st.fixed_dictionaries(
    {"field": _FIELDS | _JSON, "value": _JSON},
    optional={"hypothesis": st.text(max_size=20) | _JSON, "criterion": st.text(max_size=20) | _JSON,
              "rollback": _JSON, "changes": _JSON, "extra": _JSON},
).map(json.dumps)


@settings(max_examples=300, deadline=None)
@given(_REPLIES)
def test_any_reply_is_judged_never_raised(text: str) -> None:
    """Whatever a model says, parsing it gives a proposal or a reason (never an exception
    that would crash the run), and an accepted proposal is one valid single-field change."""
    context = RoundContext(BranchRef("ask", "main"), 0, DOMAIN, (), HarnessSpec(), [], None, SkillLibrary({}), [])
    outcome = parse_reply(text, context, "m")
    assert (outcome.proposal is None) == bool(outcome.reason)
    if outcome.proposal is not None:
        changed = HarnessSpec().with_field(outcome.proposal.field, outcome.proposal.value)
        assert changed != HarnessSpec() and outcome.proposal.field.split(".")[0] in ("rewards", "filters", "grpo")
