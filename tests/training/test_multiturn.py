"""Multi-turn GRPO on `swe:tiny`: real TRL, a tiny policy, the real sandbox.

The policy is the tiny Llama warm-started briefly on the level's reference episodes (a
short SFT keeps the test fast; the example's warm start is longer), so its episodes read
files, edit and run tests, and some fail.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evotrainer.evidence import from_jsonl
from evotrainer.training import EvaluationRequest, GRPOSettings, TrainingRequest, evaluate, train_grpo

DOMAIN = "swe:tiny"


@pytest.fixture(scope="module")
def swe_domain():  # type: ignore[no-untyped-def]
    from evotrainer.domains import get_domain

    return get_domain(DOMAIN)


@pytest.fixture(scope="module")
def policy(store, swe_domain, tmp_path_factory: pytest.TempPathFactory) -> str:  # type: ignore[no-untyped-def]
    from evotrainer.training.environment import deterministic
    from evotrainer.training.tiny import TinyRecipe, warm_start

    deterministic(0, 1)
    out = Path(tmp_path_factory.mktemp("swe-tiny-policy")) / "policy"
    warm_start(swe_domain, TinyRecipe(sft_steps=60, sft_batch_size=8, sft_tasks=64), 0, out)
    return f"hf:{out}"


def _settings() -> GRPOSettings:
    return GRPOSettings(max_steps=1, num_generations=4, prompts_per_step=2, max_completion_length=160,
                        learning_rate=1e-3, seed=3)  # fmt: skip


def test_episodes_are_played_through_tools_and_recorded_turn_by_turn(store, swe_domain, policy) -> None:  # type: ignore[no-untyped-def]
    request = TrainingRequest(DOMAIN, policy, _settings(), train_tasks=16)
    result = train_grpo(request, store)
    records = from_jsonl(store.get(result.evidence_sha256))
    assert len(records) == 8 and result.policy.sha256 != result.base_policy.sha256
    tasks = {t.task_id: t for t in swe_domain.tasks("train", 16, 0)}
    for record in records:
        assert record.tool_calls, record.text
        turns = [c["turn"] for c in record.tool_calls]
        assert turns == list(range(len(turns)))
        # The record is the episode: replaying its transcript through a fresh environment
        # gives the same tool calls and the same grade from the sandbox.
        replayed = swe_domain.replay(tasks[record.prompt_id], record.text)
        assert [c.tool for c in replayed.tool_calls] == [c["tool"] for c in record.tool_calls]
        assert dict(replayed.rewards) == dict(record.rewards)
        # The policy's own tokens only: the observations it read are not counted as its own.
        observed = sum(len(c["observation"]) for c in record.tool_calls if c["tool"] == "read_file" and c["ok"])
        assert record.completion_tokens <= len(record.text) - observed
    # A short warm start reads files and often writes what no tool understands (tool "").
    assert "read_file" in {c["tool"] for r in records for c in r.tool_calls}
    # Same request, same seed: byte-identical policy and evidence.
    again = train_grpo(request, store)
    assert (again.policy.sha256, again.evidence_sha256) == (result.policy.sha256, result.evidence_sha256)


def test_observation_tokens_are_masked_out_of_the_loss(store, swe_domain, policy) -> None:  # type: ignore[no-untyped-def]
    from evotrainer.training.environment import deterministic
    from evotrainer.training.multiturn import play
    from evotrainer.training.policies import load_policy, resolve_policy

    deterministic(0, 1)
    model, tokenizer = load_policy(resolve_policy(policy, store).sha256, store)
    tasks = swe_domain.tasks("eval", 4, 0)
    for played in play(model, tokenizer, swe_domain, tasks, temperature=1.0, max_tokens=160):
        written = tokenizer.decode([t for t, m in zip(played.completion_ids, played.env_mask, strict=True) if not m])
        calls = played.episode.tool_calls
        # What the environment wrote is each observation the policy was shown, in order.
        if calls and calls[0].tool == "read_file" and calls[0].ok and len(calls) > 1:
            assert written.startswith(calls[0].observation.rstrip("\n"))
        assert played.policy_tokens == sum(played.env_mask) > 0


def test_evaluation_plays_whole_episodes(store, policy) -> None:  # type: ignore[no-untyped-def]
    result = evaluate(EvaluationRequest(DOMAIN, policy, k=2, eval_tasks=6, max_completion_length=160), store)
    lines = store.get(result.results_sha256).decode().splitlines()
    assert len(lines) == 6 and 0.0 <= result.avg_at_k <= 1.0
    assert "turns" in lines[0] and result.component_means["format"] > 0
