"""GRPO on the tiny policy: it learns, it is bit-reproducible, its evidence is complete.

Run: pytest tests/training -q   (about a minute on 2 CPU cores; add -m "not slow" to skip SmolLM2)
"""

from __future__ import annotations

import statistics
from typing import Any

import pytest

from evotrainer.artifacts import ArtifactCorruptError
from evotrainer.evidence import from_jsonl
from evotrainer.training import (
    EvaluationRequest,
    GRPOSettings,
    InvalidTrainingConfigError,
    TrainingRequest,
    evaluate,
    load_policy,
    train_grpo,
)

SHORT = {"reward_weights": {"correctness": 1.0, "format": 0.2}, "max_completion_length": 4, "learning_rate": 2e-4}


def _request(domain: Any, **overrides: Any) -> TrainingRequest:
    settings = {**SHORT, "max_steps": 4, "prompts_per_step": 4, **overrides}
    return TrainingRequest(domain="math:digit_add", policy="tiny", settings=GRPOSettings(**settings), train_tasks=64)


def test_tiny_grpo_learns(store: Any, math_domain: Any) -> None:
    """Mean reward of the last quarter of steps beats the first quarter (and the payloads hold up)."""
    result = train_grpo(_request(math_domain, max_steps=80, prompts_per_step=8), store, domain=math_domain)
    rewards = [m["reward"] for m in result.step_metrics]
    assert len(rewards) == 80
    first, last = statistics.mean(rewards[:20]), statistics.mean(rewards[-20:])
    assert last > first + 0.05, f"no learning: first {first:.3f} last {last:.3f}"
    assert result.policy.parent_sha256 == result.base_policy.sha256
    assert 1_000_000 <= result.base_policy.parameters <= 2_000_000
    assert store.verify(result.policy.sha256) and store.verify(result.evidence_sha256)
    payload = result.training_payload()
    assert payload["steps"] == 80 and payload["environment"]["threads"] == 1
    assert result.rollouts_payload()["summary"]["completions"] == 80 * 8 * 8


def test_same_request_same_hashes_other_seed_differs(store: Any, math_domain: Any) -> None:
    a = train_grpo(_request(math_domain), store, domain=math_domain)
    b = train_grpo(_request(math_domain), store, domain=math_domain)
    assert a.policy.sha256 == b.policy.sha256
    assert a.evidence_sha256 == b.evidence_sha256
    assert a.step_metrics == b.step_metrics
    c = train_grpo(_request(math_domain, seed=1), store, domain=math_domain)
    assert c.policy.sha256 != a.policy.sha256
    assert c.evidence_sha256 != a.evidence_sha256


def test_evidence_has_every_completion_and_field(store: Any, math_domain: Any) -> None:
    result = train_grpo(_request(math_domain, max_steps=2, num_generations=4), store, domain=math_domain)
    records = from_jsonl(store.get(result.evidence_sha256))
    assert len(records) == 2 * 4 * 4
    by_group: dict[int, list[Any]] = {}
    for r in records:
        by_group.setdefault(r.group, []).append(r)
        assert set(r.rewards) == {"correctness", "format", "length"}
        assert r.reward == pytest.approx(r.rewards["correctness"] + 0.2 * r.rewards["format"])
        assert r.completion_tokens >= 1 and r.prompt_tokens >= 4
        assert r.tool_calls == ()
    assert sorted(by_group) == list(range(8))
    for group in by_group.values():
        assert len({r.prompt_id for r in group}) == 1 and [r.index for r in group] == [0, 1, 2, 3]
        # GRPO advantages are centred within a group.
        assert sum(r.advantage for r in group) == pytest.approx(0.0, abs=1e-3)
    assert {r.step for r in records} == {0, 1}


def test_zero_variance_groups_are_dropped_and_marked(store: Any, math_domain: Any) -> None:
    result = train_grpo(_request(math_domain, max_steps=3, drop_zero_variance_groups=True), store, domain=math_domain)
    records = from_jsonl(store.get(result.evidence_sha256))
    groups: dict[int, list[Any]] = {}
    for r in records:
        groups.setdefault(r.group, []).append(r)
    for group in groups.values():
        dead = statistics.pstdev([r.reward for r in group]) < 1e-3
        assert all(r.kept != dead for r in group)
    assert result.evidence_summary["dead_group_ratio"] == pytest.approx(
        sum(not g[0].kept for g in groups.values()) / len(groups)
    )


def test_evaluation_is_deterministic_avg_at_k(store: Any, math_domain: Any) -> None:
    req = EvaluationRequest(domain="math:digit_add", policy="tiny", k=4, eval_tasks=10, max_completion_length=4)
    a, b = evaluate(req, store, domain=math_domain), evaluate(req, store, domain=math_domain)
    assert a.results_sha256 == b.results_sha256 and a.avg_at_k == b.avg_at_k
    assert 0.0 <= a.avg_at_k <= a.pass_at_k <= 1.0
    lines = store.get(a.results_sha256).decode().splitlines()
    assert len(lines) == 10
    payload = a.evaluation_payload()
    assert payload["metric"] == "avg@4" and payload["problems"] == 10


def test_corrupted_checkpoint_is_refused(tmp_path: Any, math_domain: Any) -> None:
    from evotrainer.artifacts import open_store
    from evotrainer.training import resolve_policy

    store = open_store(tmp_path / "arts")
    policy = resolve_policy("tiny", store, domain=math_domain, domain_spec="math:digit_add")
    weights = next(sha for path, _, sha in store.manifest(policy.sha256) if path.endswith(".safetensors"))
    store.backend.write_atomic(f"objects/{weights[:2]}/{weights[2:]}", [b"not weights"])
    assert not store.verify(policy.sha256)
    with pytest.raises(ArtifactCorruptError):
        load_policy(policy.sha256, store)


def test_a_tampered_checkout_cache_is_rebuilt_from_the_store(tmp_path: Any, math_domain: Any) -> None:
    from evotrainer.artifacts import open_store
    from evotrainer.training import resolve_policy

    store = open_store(tmp_path / "arts")
    policy = resolve_policy("tiny", store, domain=math_domain, domain_spec="math:digit_add")
    cached = store.checkout(policy.sha256)
    weights = next(cached.rglob("*.safetensors"))
    original = weights.read_bytes()
    weights.write_bytes(b"not weights")
    assert store.checkout(policy.sha256) == cached and weights.read_bytes() == original
    load_policy(policy.sha256, store)  # loads the rebuilt, verified copy


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"num_generations": 1}, "num_generations"),
        ({"reward_weights": {"correctness": 0.0}}, "reward_weights"),
        ({"reward_weights": {}}, "reward_weights"),
        ({"epsilon": 0.2, "epsilon_high": 0.1}, "epsilon_high"),
        ({"temperature": 0.0}, "temperature"),
        ({"loss_type": "ppo"}, "loss_type"),
        ({"beta": -0.1}, "beta"),
    ],
)
def test_bad_settings_are_rejected_with_a_fix(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidTrainingConfigError) as info:
        GRPOSettings(**overrides)
    assert info.value.field_name == field and str(info.value)


def test_bad_requests_are_rejected(store: Any, math_domain: Any) -> None:
    with pytest.raises(InvalidTrainingConfigError, match="use 'tiny'"):
        TrainingRequest(domain="math:digit_add", policy="gpt-5")
    with pytest.raises(InvalidTrainingConfigError, match="k=1 or a temperature"):
        EvaluationRequest(domain="math:digit_add", policy="tiny", temperature=0.0, k=8)
    with pytest.raises(InvalidTrainingConfigError, match="not reward components"):
        train_grpo(_request(math_domain, reward_weights={"elegance": 1.0}), store, domain=math_domain)
    with pytest.raises(InvalidTrainingConfigError, match="left no training task"):
        train_grpo(_request(math_domain, levels=("olympiad",)), store, domain=math_domain)


def test_settings_payload_is_json() -> None:
    import json

    data = GRPOSettings(levels=("easy",)).to_dict()
    assert json.loads(json.dumps(data)) == data
