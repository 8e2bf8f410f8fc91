"""The built-in proposer: conditions become valid single-field changes, ordered by skills
and by the escalation rule."""

from __future__ import annotations

from evotrainer.evolve.proposer import builtin_proposals
from evotrainer.evolve.skills import Skill, SkillLibrary
from evotrainer.harness import HarnessSpec

MATH = ("correctness", "format")


def fields(proposals: list) -> list[tuple[str, object]]:  # type: ignore[type-arg]
    return [(p.field, p.value) for p in proposals]


def test_insufficient_signal_asks_for_a_more_continuous_reward_first() -> None:
    proposals = builtin_proposals(HarnessSpec(), ["insufficient_signal"], "math:digit_add", MATH)
    assert fields(proposals)[:3] == [("rewards.weights.format", 0.2), ("grpo.num_generations", 16),
                                     ("filters.drop_zero_variance_groups", True)]  # fmt: skip
    # then the step size and budget, answering the same condition
    assert ("grpo.learning_rate", 2e-3) in fields(proposals) and {p.trigger for p in proposals} == {
        "insufficient_signal"}
    assert all(HarnessSpec().with_field(p.field, p.value) != HarnessSpec() for p in proposals)


def test_changes_that_would_change_nothing_or_not_validate_are_left_out() -> None:
    spec = HarnessSpec().with_field("rewards.weights.format", 0.2).with_field("filters.drop_zero_variance_groups", True)
    proposals = fields(builtin_proposals(spec, ["insufficient_signal"], "math", MATH))
    assert ("rewards.weights.format", 0.2) not in proposals
    assert ("filters.drop_zero_variance_groups", True) not in proposals
    hacked = HarnessSpec().with_field("rewards.weights.format", 0.5)
    assert fields(builtin_proposals(hacked, ["reward_hacking"], "math", MATH))[:2] == [
        ("rewards.weights.format", 0.0), ("grpo.beta", 0.04)]


def test_a_skill_with_a_good_record_goes_first_and_escalation_puts_subtractions_first() -> None:
    spec = HarnessSpec().with_field("rewards.weights.format", 0.5)
    library = SkillLibrary({"reward_hacking/grpo.beta/raise": Skill(
        "reward_hacking/grpo.beta/raise", "reward_hacking", "grpo.beta", "raise", "training_stability",
        successes=2, tried_in={"math"}, validated_in={"math"})})  # fmt: skip
    ranked = builtin_proposals(spec, ["reward_hacking"], "math:arithmetic", MATH, library)
    assert ranked[0].field == "grpo.beta"
    # Elsewhere and not general, the skill says nothing.
    assert builtin_proposals(spec, ["reward_hacking"], "code", MATH, library)[0].field == "rewards.weights.format"
    # A change answering a validity condition comes first, whatever order the conditions came in.
    first = builtin_proposals(spec, ["insufficient_signal", "reward_hacking"], "math", MATH)[0]
    assert (first.field, first.value) in (("rewards.weights.format", 0.0), ("grpo.beta", 0.04))
    hacked_escalated = builtin_proposals(spec, ["insufficient_signal", "reward_hacking"], "math", MATH,
                                         rejected_in_a_row=2)  # fmt: skip
    assert (hacked_escalated[0].field, hacked_escalated[0].value) == ("rewards.weights.format", 0.0)


def test_what_earlier_versions_added_is_offered_back_and_first_after_two_rejections() -> None:
    spec = HarnessSpec().with_field("grpo.beta", 0.04).with_field("filters.drop_zero_variance_groups", True)
    calm = fields(builtin_proposals(spec, ["insufficient_signal"], "math", MATH))
    assert ("grpo.beta", 0.0) in calm and ("filters.drop_zero_variance_groups", False) in calm
    assert not builtin_proposals(spec, ["insufficient_signal"], "math", MATH)[0].subtraction
    escalated = builtin_proposals(spec, ["insufficient_signal"], "math", MATH, rejected_in_a_row=2)
    assert [p.subtraction for p in escalated[:2]] == [True, True]


def test_each_change_is_filed_under_the_condition_it_answers() -> None:
    proposals = builtin_proposals(HarnessSpec(), ["insufficient_signal", "exploration_collapse"], "math", MATH)
    triggers = {p.field: p.trigger for p in proposals}
    assert triggers["grpo.temperature"] == "exploration_collapse"
    assert triggers["grpo.num_generations"] == "insufficient_signal"
    assert triggers["grpo.learning_rate"] == "insufficient_signal"  # answers neither: filed under the first


def test_a_length_budget_already_at_its_floor_is_not_raised() -> None:
    spec = HarnessSpec().with_field("grpo.max_completion_length", 3)
    assert "grpo.max_completion_length" not in dict(fields(builtin_proposals(spec, ["echo_trap"], "math", MATH)))


def test_the_reward_trend_sets_the_step_size_and_an_inconclusive_gate_asks_for_more_samples() -> None:
    from evotrainer.evolve.proposer import continuation_gain, reward_trend

    rising = [{"step": i, "reward": 0.1 * i} for i in range(9)]
    falling = [{"step": i, "reward": 0.8 - 0.1 * i} for i in range(9)]
    assert abs(reward_trend(rising) - 0.6) < 1e-9 and reward_trend(falling) < 0 and reward_trend(rising[:2]) is None
    up = fields(builtin_proposals(HarnessSpec(), [], "math", MATH, trend=0.6))
    down = fields(builtin_proposals(HarnessSpec(), [], "math", MATH, trend=-0.6))
    assert up[0] == ("grpo.learning_rate", 2e-3) and down[0] == ("grpo.learning_rate", 5e-4)
    # More samples only when the gate's last rejection was for want of power.
    assert fields(builtin_proposals(HarnessSpec(), [], "math", MATH, inconclusive=True))[0] == ("evaluation.k", 16)
    assert fields(builtin_proposals(HarnessSpec(), [], "math", MATH))[-1][0] != "grpo.learning_rate"
    assert ("evaluation.k", 16) in up[-3:]
    # More of the same ranks ahead of untried changes while the start is untrained or the run climbs.
    assert continuation_gain(False, None) > 0 and continuation_gain(True, 0.6) > 0 > continuation_gain(True, 0.0)


def test_a_gamed_bonus_is_taken_away_before_anything_else_and_never_topped_up() -> None:
    spec = HarnessSpec().with_field("rewards.weights.length", 2.0)
    seen = ["insufficient_signal", "echo_trap", "reward_hacking", "length_gaming"]
    ranked = builtin_proposals(spec, seen, "math", ("correctness", "format", "length"))
    assert (ranked[0].field, ranked[0].value) == ("rewards.weights.length", 0.0)
    # More weight on another shaped component is no repair for a reward that is gamed.
    topped_up = next(i for i, p in enumerate(ranked) if p.field == "rewards.weights.format")
    repairs = [i for i, p in enumerate(ranked) if p.field in ("grpo.beta", "grpo.max_completion_length")]
    assert all(i < topped_up for i in repairs)


def _metrics(rewards: list[float], dead: float) -> list[dict[str, float]]:
    return [{"reward": r, "frac_reward_zero_std": dead} for r in rewards]


def test_a_run_that_learned_nothing_asks_for_a_step_ten_times_larger_first() -> None:
    from evotrainer.evolve.proposer import stalled

    # Flat and low with some live groups: SmolLM2 at TRL's default 1e-6 (README, GPU).
    assert stalled(_metrics([0.0, 0.01, 0.0, 0.02, 0.0, 0.01], dead=0.94))
    assert not stalled(_metrics([0.1, 0.2, 0.3, 0.4, 0.5, 0.6], dead=0.5))  # climbing
    assert not stalled(_metrics([0.86, 0.87, 0.86, 0.88, 0.87, 0.86], dead=0.5))  # levelled off high
    assert not stalled(_metrics([0.0] * 6, dead=1.0))  # no group has signal: no step size helps
    assert not stalled(_metrics([0.0, 0.0], dead=0.9))  # too short to tell

    spec = HarnessSpec().with_field("grpo.learning_rate", 1e-6)
    stuck = builtin_proposals(spec, [], "math:column_add", MATH, stalled_run=True)
    assert fields(stuck)[:2] == [("grpo.learning_rate", 1e-5), ("grpo.learning_rate", 2e-6)]
    assert "tenfold" in stuck[0].hypothesis and stuck[0].trigger == "no_condition"
    assert ("grpo.learning_rate", 1e-5) not in fields(builtin_proposals(spec, [], "math:column_add", MATH))
