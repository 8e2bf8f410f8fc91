"""Skills: what an intervention taught, kept so later proposals can rank by it.

    skill_event(history, candidate, decided)     # the SkillRecorded a decision adds
    library = skill_library(store)               # every experiment's outcomes, summed
    library.rank("math", "insufficient_signal", "rewards.weights.format", "add")

A skill is (trigger, field, direction): the condition diagnosed on the run an
intervention answered, the harness field it changed and which way (`raise`, `lower`,
`add`, `enable`, `disable`, `set`), e.g. `insufficient_signal/rewards.weights.format/add`.
The first verdict of the promotion gate on an intervention branch appends one SkillRecorded
next to its PromotionDecided (in the same append): successes 1 when it was promoted,
failures 1 when not, and the margin as its effect size. One run is one outcome: the same
branch judged again (another incumbent, another gate) adds a decision, not an outcome. Events never change, so the
counts are per outcome and `skill_library` adds them up across experiments; a skill is
validated in a domain where it succeeded at least once, and general (the shared library,
METHOD.md "Skills") once validated in two or more domains.

A skill brought from another record (`evotrainer skills import`, evolve/skill_files.py) is
a SkillImported event: its counts join the library's with where they came from kept
(`imported_from`), and the change that validated it travels with it, so that it can
propose that change here (evolve/skill_proposals.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from evotrainer.events import SkillRecorded
from evotrainer.evolve.tasks import lost_to_faults
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, StoredEvent

Category = Literal["reward_design", "filtering", "training_stability", "evaluation_protocol", "cross_domain_transfer"]
_CATEGORIES: dict[str, Category] = {"rewards": "reward_design", "filters": "filtering", "grpo": "training_stability",
                                    "evaluation": "evaluation_protocol"}  # fmt: skip
NO_CONDITION = "no_condition"


def direction(old: Any, new: Any) -> str:
    """Which way a change moved its field."""
    if isinstance(new, bool) or isinstance(old, bool):
        return "enable" if new else "disable"
    if old is None:
        return "add"
    if isinstance(old, int | float) and isinstance(new, int | float):
        return "raise" if new > old else "lower"
    return "set"


def skill_id(trigger: str, field_path: str, way: str) -> str:
    return f"{trigger}/{field_path}/{way}"


# The harness fields whose changes answer each condition of the rule engine (what its
# suggestion names; a trailing dot is a prefix). The built-in proposer labels its changes
# with trigger_for too, so a skill is recorded under the trigger it was proposed for.
ANSWERED_BY: dict[str, tuple[str, ...]] = {
    "insufficient_signal": ("rewards.weights.", "grpo.num_generations", "filters.drop_zero_variance_groups"),
    "exploration_collapse": ("grpo.temperature", "grpo.beta"),
    "reward_hacking": ("rewards.weights.", "grpo.beta"),
    "echo_trap": ("grpo.max_completion_length", "filters.mask_truncated_completions"),
    "length_gaming": ("grpo.max_completion_length", "filters.mask_truncated_completions"),
    "laziness": ("rewards.weights.",),
}


def answers(condition: str, field_path: str) -> bool:
    """Whether a change to `field_path` is one of those the condition's suggestion names."""
    return any(field_path == path or (path.endswith(".") and field_path.startswith(path))
               for path in ANSWERED_BY.get(condition, ()))  # fmt: skip


def trigger_for(conditions: Sequence[str], field_path: str) -> str:
    """The first diagnosed condition a change to `field_path` answers; a change that
    answers none of them (the step size, say) is filed under the first; NO_CONDITION when
    nothing was diagnosed."""
    for condition in conditions:
        if answers(condition, field_path):
            return condition
    return conditions[0] if conditions else NO_CONDITION


def trigger_of(history: Sequence[StoredEvent], proposal: StoredEvent) -> str:
    """The condition an intervention answered, from the last diagnosis recorded before it
    was proposed (on the branch it was proposed on, or an ancestor)."""
    for event in reversed([e for e in history if e.global_position < proposal.global_position]):
        if event.type == "DiagnosisRecorded":
            return trigger_for(event.payload.get("conditions", []), proposal.payload["field"])
    return NO_CONDITION


def skill_event(proposal: StoredEvent, trigger: str, domain: str, promoted: bool, margin: float | None,
                validation: str | None = None) -> SkillRecorded:  # fmt: skip
    """The outcome of one intervention as a skill record (`margin` None: it was never
    scored, e.g. its training run failed)."""
    p = proposal.payload
    way = direction(p.get("old_value"), p["new_value"])
    family = domain.split(":", 1)[0]
    outcome = "promoted" if promoted else "rejected"
    verdict = f"{outcome} by the gate, margin {margin:+.4f}" if margin is not None else outcome
    return SkillRecorded(
        skill_id=skill_id(trigger, p["field"], way), trigger=trigger,
        intervention=f"{p['field']}: {p.get('old_value')!r} -> {p['new_value']!r}",
        expected_outcome=p["hypothesis"], validation=f"{validation or verdict} ({domain})",
        domains=[family], category=_CATEGORIES.get(p["field"].split(".", 1)[0], "training_stability"),
        successes=int(promoted), failures=int(not promoted), effect_size=margin,
    )  # fmt: skip


@dataclass
class Skill:
    """One skill's outcomes, summed."""

    skill_id: str
    trigger: str
    field_path: str
    way: str
    category: str
    successes: int = 0
    failures: int = 0
    effects: list[float] = field(default_factory=list)
    validated_in: set[str] = field(default_factory=set)
    tried_in: set[str] = field(default_factory=set)
    expected_outcome: str = ""
    succeeded_on: list[str] = field(default_factory=list)
    """EXPERIMENT/BRANCH of each candidate promoted under it here, oldest first."""
    imported_from: list[dict[str, Any]] = field(default_factory=list)
    """The source of each SkillImported of it (file, file_sha256, exported_from)."""
    imported_change: dict[str, Any] | None = None
    """field, old_value, new_value: the change that validated it, as its last import says."""

    @property
    def general(self) -> bool:
        """In the shared library: validated in two or more domains."""
        return len(self.validated_in) >= 2

    @property
    def mean_effect(self) -> float | None:
        return sum(self.effects) / len(self.effects) if self.effects else None

    def to_json(self) -> dict[str, Any]:
        return {"skill_id": self.skill_id, "trigger": self.trigger, "field": self.field_path, "direction": self.way,
                "category": self.category, "successes": self.successes, "failures": self.failures,
                "mean_effect": self.mean_effect, "validated_in": sorted(self.validated_in),
                "tried_in": sorted(self.tried_in), "general": self.general,
                "expected_outcome": self.expected_outcome, "imported_from": self.imported_from}  # fmt: skip


@dataclass
class SkillLibrary:
    skills: dict[str, Skill]

    def rank(self, domain: str, trigger: str, field_path: str, way: str) -> float:
        """How much the record favours this change here: successes minus failures of the
        skill, over every domain, once it has been tried in this domain or is general (a
        skill tried only elsewhere says nothing here); 0 when never tried."""
        skill = self.skills.get(skill_id(trigger, field_path, way))
        if skill is None:
            return 0.0
        family = domain.split(":", 1)[0]
        if family in skill.tried_in or skill.general:
            return float(skill.successes - skill.failures)
        return 0.0


def skill_library(store: EventStore, experiments: Sequence[str] | None = None) -> SkillLibrary:
    """Every SkillRecorded and SkillImported on the experiments' main branches (all
    experiments by default)."""
    names = sorted({info.experiment for info in store.branches()}) if experiments is None else experiments
    skills: dict[str, Skill] = {}
    for experiment in names:
        faults: set[int] = set()
        for event in store.read_branch(BranchRef(experiment, "main")):
            if event.type == "PromotionDecided" and _for_a_fault(event):
                faults.add(event.seq)
            if event.type not in ("SkillRecorded", "SkillImported") or event.seq - 1 in faults:
                continue  # (a skill appended with a rejection for a fault is no outcome)
            p = event.payload
            trigger, field_path, way = p["skill_id"].split("/", 2)
            skill = skills.setdefault(p["skill_id"], Skill(p["skill_id"], trigger, field_path, way, p["category"]))
            skill.successes += p["successes"]
            skill.failures += p["failures"]
            skill.expected_outcome = p["expected_outcome"] or skill.expected_outcome
            if event.type == "SkillImported":
                skill.effects.extend(float(x) for x in p["effect_sizes"])
                skill.tried_in.update(p["tried_in"])
                skill.validated_in.update(p["validated_in"])
                skill.imported_from.append(p["source"])
                skill.imported_change = p["change"]
                continue
            if p.get("effect_size") is not None:
                skill.effects.append(float(p["effect_size"]))
            skill.tried_in.update(p.get("domains", []))
            if p["successes"]:
                skill.validated_in.update(p.get("domains", []))
                # promotion.py keys a skill's outcome by its candidate: skill:EXPERIMENT/BRANCH
                skill.succeeded_on.append((event.idempotency_key or "").removeprefix("skill:"))
    return SkillLibrary(skills)


def _for_a_fault(decided: StoredEvent) -> bool:
    """A rejection an earlier version recorded because the candidate's workers died (its
    work ran out of attempts): no outcome of the skill, and no verdict."""
    key = decided.idempotency_key or ""
    failure = str(decided.payload.get("evidence", {}).get("failure", ""))
    return key.endswith(":unrunnable") and lost_to_faults(failure)
