"""The built-in proposer: diagnosed conditions -> single-field changes of the harness,
ordered by what the skill library says about each.

    proposals = builtin_proposals(spec, ["insufficient_signal"], domain, library)
    proposals[0].field, proposals[0].value, proposals[0].hypothesis

Each condition of the rule engine (METHOD.md) maps to the concrete changes its suggestion
names, on the fields this harness has: a more continuous reward (a weight for a reward
component the domain reports and the harness ignores), bigger groups or dropping dead
ones for insufficient signal; temperature or a KL term for exploration collapse; removing
shaped terms or a KL term for reward hacking; a shorter length budget or masking
truncated completions for echo traps and length gaming. After those (or with no condition
diagnosed) come the step size and the training budget. Changes that would not validate, or
change nothing, are left out.

Last come subtractions: each component an earlier version added (a shaped reward weight, a
KL term, a filter) taken out again. Order: proposals whose skill has a better record come
first; after `ESCALATE_AFTER` rejections in a row, subtractions come before additions, as
the method's escalation rule says; otherwise the order above.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evotrainer.errors import UsageError
from evotrainer.evolve.skills import NO_CONDITION, SkillLibrary, answers, direction, trigger_for
from evotrainer.harness.spec import HarnessSpec

MAX_EVALUATION_SAMPLES = 128
"""Samples per problem the proposer raises evaluation.k to, at most."""
MAX_EVALUATION_PROBLEMS = 2000
"""Problems per half a second look raises evaluation.eval_tasks to, at most: evaluation
time grows with the problems, and past a few thousand a look costs more than a chunk."""
ESCALATE_AFTER = 2
"""Rejected versions in a row after which subtractions are tried first."""


@dataclass(frozen=True)
class Proposal:
    field: str
    value: Any
    hypothesis: str
    trigger: str
    """The condition it answers (skills.NO_CONDITION when none was diagnosed)."""
    criterion: str | None = None
    """None: the default criterion for the field (harness.intervention.default_criterion)."""
    rollback: str | None = None
    proposer: str = "builtin"
    """builtin (these rules), skill:ID (evolve/skill_proposals.py), `llm:MODEL`, or human."""
    reply_id: str | None = None
    """The event that recorded the reply it came from (a ProposerReplied or DecisionRecorded)."""

    @property
    def subtraction(self) -> bool:
        return self.value is False or self.value == 0


def reward_trend(step_metrics: Sequence[Mapping[str, Any]]) -> float | None:
    """How much the mean training reward rose over a run: the last third's mean minus the
    first third's (None for a run too short to tell). Positive: still climbing when it
    stopped; negative: the run made its own reward worse."""
    rewards = [float(m["reward"]) for m in step_metrics if isinstance(m.get("reward"), int | float)]
    if len(rewards) < 3:
        return None
    third = len(rewards) // 3
    return sum(rewards[-third:]) / third - sum(rewards[:third]) / third


_FLAT = 0.02
"""A reward trend within this of zero says nothing about the step size."""

STALLED_REWARD = 0.2
"""A run whose mean training reward stayed below this, and flat, learned nothing."""


def stalled(step_metrics: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a run left its reward flat and low while some of its groups had signal (not
    every group dead): the step size is far too small for the policy, not the reward too
    sparse to learn from. TRL's default learning rate (1e-6) on SmolLM2-135M does this:
    80 steps on column sums left it at 0.010 where 1e-5 reached 0.973 (README, GPU)."""
    trend = reward_trend(step_metrics)
    rewards = [float(m["reward"]) for m in step_metrics if isinstance(m.get("reward"), int | float)]
    dead = [float(m["frac_reward_zero_std"]) for m in step_metrics
            if isinstance(m.get("frac_reward_zero_std"), int | float)]  # fmt: skip
    some_signal = bool(dead) and sum(dead) / len(dead) < 1.0
    return trend is not None and abs(trend) <= _FLAT and sum(rewards) / len(rewards) < STALLED_REWARD and some_signal


VALIDITY_CONDITIONS = ("reward_hacking", "leaked_reference", "length_gaming", "echo_trap")
"""Conditions that say a score cannot be trusted: answering them comes before any gain,
the reward itself first (a gamed reward makes every other repair moot)."""


def _repairs(condition: str, proposal: Proposal) -> bool:
    """Whether the proposal is a repair for a validity condition: a change its suggestion
    names, and never more weight on a shaped component (that is what gets gamed)."""
    adds_weight = proposal.field.startswith("rewards.weights.") and not proposal.subtraction
    return answers(condition, proposal.field) and not adds_weight


def expected_gain(
    proposal: Proposal, spec: HarnessSpec, trend: float | None, conditions: Sequence[str] = (),
    inconclusive: bool = False, stalled_run: bool = False,
) -> float:
    """What the evidence says of a change before any skill has: a change answering a
    diagnosed validity condition comes first of all (whichever condition it was filed
    under); then more evaluation samples when the gate's last rejection was for want of
    power (a positive gain whose interval reached below the margin); a run that learned
    nothing (`stalled`) asks for a step ten times larger first, as a coarse search moves by
    decades, then twice as large; a run still climbing when it stopped asks for a larger
    step, one whose reward fell for a smaller one. More samples the evidence did not ask
    for come last: they cost evaluation time for nothing."""
    repaired = [i for i, c in enumerate(VALIDITY_CONDITIONS) if c in conditions and _repairs(c, proposal)]
    if repaired:
        return 2.0 + (len(VALIDITY_CONDITIONS) - repaired[0]) / 10
    if proposal.field == "evaluation.k":
        return 1.5 if inconclusive else -1.0
    if proposal.field == "grpo.learning_rate" and stalled_run:
        factor = proposal.value / spec.grpo.learning_rate
        return 1.2 if factor >= 10 else (0.8 if factor > 1 else -1.0)
    if proposal.field == "grpo.learning_rate" and trend is not None:
        raising = proposal.value > spec.grpo.learning_rate
        if trend > _FLAT:
            return 1.0 if raising else -1.0
        if trend < -_FLAT:
            return 1.0 if not raising else -1.0
    return 0.0


def continuation_gain(trained: bool, trend: float | None) -> float:
    """Where more of the same ranks among the changes (on expected_gain's scale): ahead of
    everything but a validity fix and a step size the evidence asks for while the start is
    untrained or the last run was still climbing; behind every change once it levelled off
    or fell."""
    if not trained or (trend is not None and trend > _FLAT):
        return 0.5
    return -0.5


def builtin_proposals(
    spec: HarnessSpec,
    conditions: Sequence[str],
    domain: str,
    reward_components: Sequence[str],
    library: SkillLibrary | None = None,
    rejected_in_a_row: int = 0,
    trend: float | None = None,
    inconclusive: bool = False,
    stalled_run: bool = False,
) -> list[Proposal]:
    """Every single-field change the diagnosed conditions suggest, best first: by the skill
    library's record, then by what the last run's reward trend says (expected_gain)."""
    raw: list[Proposal] = []
    for condition in conditions:
        raw.extend(_for_condition(spec, condition, reward_components))
    if stalled_run and spec.grpo.learning_rate * 10 < 1:
        tenfold = float(f"{spec.grpo.learning_rate * 10:.12g}")  # 1e-5, not 9.999999999999999e-06
        raw.append(Proposal("grpo.learning_rate", tenfold, "if the step size grows tenfold, "
                            "Avg@k rises, because a whole run at this step size left the reward flat and low while "
                            "some groups had signal: the step is far too small", NO_CONDITION))  # fmt: skip
    # Then the step size and the training budget, and taking back what earlier versions
    # added: what is left when the changes a condition suggests are spent (the method's
    # "switch the layer the hypotheses target" and "a subtraction, not an addition").
    raw.extend(_for_condition(spec, NO_CONDITION, reward_components))
    raw.extend(_subtractions(spec))
    valid, seen = [], set()
    for proposal in raw:
        key = (proposal.field, repr(proposal.value))
        if key in seen or not _changes(spec, proposal):
            continue
        seen.add(key)
        # Filed under the condition its field answers, as its skill will be (skills.trigger_for).
        valid.append(dataclasses.replace(proposal, trigger=trigger_for(conditions, proposal.field)))
    escalate = rejected_in_a_row >= ESCALATE_AFTER

    def order(indexed: tuple[int, Proposal]) -> tuple[float, float, bool, int]:
        i, p = indexed
        way = direction(current_value(spec, p.field), p.value)
        rank = library.rank(domain, p.trigger, p.field, way) if library else 0.0
        gain = expected_gain(p, spec, trend, conditions, inconclusive, stalled_run)
        return (-rank, -gain, escalate and not p.subtraction, i)

    return [p for _, p in sorted(enumerate(valid), key=order)]


PROPOSABLE_SECTIONS = ("rewards", "filters", "grpo")
"""What a proposer may change: how training runs. How it is measured (evaluation: a second
look's business), judged (promotion: a person's, `harness record --override`) and
diagnosed (diagnostics: only once retro-validated) are not proposals."""


def check_proposable(field: str) -> None:
    """Refuse a change outside PROPOSABLE_SECTIONS, saying why."""
    if field.split(".", 1)[0] not in PROPOSABLE_SECTIONS:
        raise UsageError(f"{field} is not a proposer's to change: a proposal changes one field under "
                         f"{', '.join(s + '.' for s in PROPOSABLE_SECTIONS)}")  # fmt: skip


def current_value(spec: HarnessSpec, path: str) -> Any:
    """A field's value, None for a key a change would add under a mapping."""
    try:
        return spec.get_field(path)
    except UsageError:
        return None  # a new key under a mapping (a new reward weight)


def _changes(spec: HarnessSpec, proposal: Proposal) -> bool:
    """Whether the change is a valid harness that trains (its GRPO settings build) and
    differs from `spec`."""
    try:
        changed = spec.with_field(proposal.field, proposal.value)
        changed.to_grpo_settings()
    except UsageError:
        return False
    return changed != spec


def _subtractions(spec: HarnessSpec) -> list[Proposal]:
    """Each component an earlier version added, removed again."""
    grpo, filters = spec.grpo, spec.filters
    out = [Proposal(f"rewards.weights.{c}", 0.0, f"if {c} no longer counts, Avg@k rises, because the policy "
                    f"chases {c} at the expense of correctness", NO_CONDITION)
           for c, w in spec.rewards.weights.items() if w and c != spec.rewards.correctness_component]  # fmt: skip
    if grpo.beta > 0:
        out.append(Proposal("grpo.beta", 0.0, "if the KL term goes, Avg@k rises, because it holds the policy too "
                            "close to where it started", NO_CONDITION))  # fmt: skip
    if filters.drop_zero_variance_groups:
        out.append(Proposal("filters.drop_zero_variance_groups", False, "if dead groups stay in the batch, "
                            "training is steadier, because dropping them left steps with almost no data",
                            NO_CONDITION))  # fmt: skip
    if filters.mask_truncated_completions:
        out.append(Proposal("filters.mask_truncated_completions", False, "if truncated completions count again, "
                            "long correct reasoning is not thrown away", NO_CONDITION))  # fmt: skip
    return out


def _for_condition(spec: HarnessSpec, condition: str, components: Sequence[str]) -> list[Proposal]:
    grpo, weights = spec.grpo, spec.rewards.weights
    shaped = [c for c in components if c != spec.rewards.correctness_component]
    unused = [c for c in shaped if not weights.get(c)]
    used = [c for c, w in weights.items() if w and c != spec.rewards.correctness_component]
    out: list[Proposal] = []

    def add(field: str, value: Any, hypothesis: str) -> None:
        out.append(Proposal(field, value, hypothesis, condition))

    if condition == "insufficient_signal":
        for c in unused:
            add(f"rewards.weights.{c}", 0.2, f"if {c} earns 0.2 next to correctness, dead groups get a gradient, "
                f"because {c} varies inside groups where correctness does not")  # fmt: skip
        add("grpo.num_generations", min(2 * grpo.num_generations, 32), "if each group holds twice as many "
            "completions, fewer groups are all equal, because a rare success is likelier to appear in a bigger group")
        add("filters.drop_zero_variance_groups", True, "if dead groups are dropped, every step learns from groups "
            "with signal, because a group with equal rewards only dilutes the batch")
    elif condition == "exploration_collapse":
        add("grpo.temperature", round(min(grpo.temperature + 0.2, 2.0), 3), "if sampling is hotter, completions "
            "within a group differ again, because the policy's distribution has narrowed")
        if grpo.beta == 0:
            add("grpo.beta", 0.04, "if a KL term holds the policy near its reference, diversity stops falling, "
                "because collapse is the policy drifting onto a few completions")
    elif condition == "reward_hacking":
        for c in used:
            add(f"rewards.weights.{c}", 0.0, f"if {c} no longer counts, correctness rises again, because the "
                f"policy learned to earn {c} instead of solving")
        if grpo.beta == 0:
            add("grpo.beta", 0.04, "if a KL term holds the policy near its reference, the shaped reward cannot be "
                "gamed as far, because gaming it needs a large drift")
    elif condition in ("echo_trap", "length_gaming"):
        shorter = max(4, int(grpo.max_completion_length * 0.75))
        if shorter < grpo.max_completion_length:
            add("grpo.max_completion_length", shorter, "if the length budget shrinks by a quarter, long failing "
                "completions stop paying, because they are cut before they end")
        add("filters.mask_truncated_completions", True, "if truncated completions leave the loss, length stops "
            "being rewarded, because a completion that runs out of budget no longer counts")
    elif condition == "laziness":
        for c in unused:
            add(f"rewards.weights.{c}", 0.2, f"if {c} earns 0.2, the behaviour it measures comes back, because "
                "it is rewarded on its own")
    elif condition == NO_CONDITION:
        add("grpo.learning_rate", grpo.learning_rate * 2, "if the step size doubles, Avg@k rises, because a short "
            "run barely moves the policy")
        add("grpo.max_steps", grpo.max_steps * 2, "if the run is twice as long, Avg@k rises, because training "
            "stopped while the reward was still climbing")
        add("grpo.learning_rate", grpo.learning_rate / 2, "if the step size halves, Avg@k rises, because large "
            "steps overshoot on a small policy")
        k = spec.evaluation.k
        if k < MAX_EVALUATION_SAMPLES:
            add("evaluation.k", min(2 * k, MAX_EVALUATION_SAMPLES), "if each problem is sampled twice as often, "
                "the gate tells a real gain from noise, because the last interval straddled the margin with a "
                "positive mean")
    return out
