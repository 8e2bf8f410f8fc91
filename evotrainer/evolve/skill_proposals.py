"""Skills that propose: a validated skill whose trigger fires puts its own change forward
as a candidate, recorded with proposer `skill:ID` (and shown so by `evotrainer lineage`).

    candidates = skill_candidates(store, spec, ["insufficient_signal"], "math:digit_add", library)
    evotrainer skills propose demo/main          # record them on a branch, from its diagnosis

A skill fires when its trigger is one of the conditions diagnosed (a `no_condition` skill:
when none is), it is validated (more successes than failures, at least one success) and
its change still means something here: the change that validated it (evolve/skill_files.py),
carried over to this harness. A number it raised or lowered moves by the same ratio from
this harness's value; any other change (a weight added, a switch flipped, a value set)
takes the same new value. A change that would not move the field the skill's way, or that
does not validate or train, is left out. A skill validated only in another domain still
proposes (cross-domain transfer, METHOD.md "Skills"), and its hypothesis says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evotrainer.errors import UsageError
from evotrainer.evolve.proposer import Proposal, current_value
from evotrainer.evolve.skill_files import skill_change
from evotrainer.evolve.skills import NO_CONDITION, Skill, SkillLibrary, direction
from evotrainer.harness.intervention import design_intervention
from evotrainer.harness.spec import HarnessSpec
from evotrainer.harness.versions import branch_harness
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, NewEvent, StoredEvent


def fires(skill: Skill, conditions: Sequence[str]) -> bool:
    """Whether the skill is validated and its trigger is what was diagnosed."""
    validated = skill.successes > skill.failures and bool(skill.validated_in)
    return validated and (skill.trigger in conditions or (skill.trigger == NO_CONDITION and not conditions))


def carried_value(change: dict[str, Any], current: Any, way: str) -> Any:
    """The skill's new value for a harness whose field is `current` now."""
    old, new = change.get("old_value"), change["new_value"]
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (old, new, current))
    if way in ("raise", "lower") and numbers and old and current != old:
        scaled = current * (new / old)
        return round(scaled) if isinstance(new, int) and isinstance(current, int) else float(f"{scaled:.6g}")
    return new


def skill_candidates(
    store: EventStore, spec: HarnessSpec, conditions: Sequence[str], domain: str, library: SkillLibrary
) -> list[Proposal]:
    """Each firing skill's change of `spec`, best record first (general skills, then more
    successes net of failures, then the larger mean effect)."""
    family = domain.split(":", 1)[0]
    out: list[tuple[tuple[bool, int, float], Proposal]] = []
    for skill in library.skills.values():
        if not fires(skill, conditions):
            continue
        change = skill_change(store, skill)
        if change is None or change.get("field") != skill.field_path:
            continue
        current = current_value(spec, skill.field_path)
        value = carried_value(change, current, skill.way)
        if direction(current, value) != skill.way or not _trains(spec, skill.field_path, value):
            continue
        where = ", ".join(sorted(skill.validated_in))
        transfer = "" if family in skill.validated_in else f"; transferred from {where}, untried here"
        hypothesis = (f"{skill.expected_outcome} (skill {skill.skill_id}: {skill.successes} successes, "
                      f"{skill.failures} failures, validated in {where}{transfer})")  # fmt: skip
        rank = (not skill.general, skill.failures - skill.successes, -(skill.mean_effect or 0.0))
        proposal = Proposal(skill.field_path, value, hypothesis, skill.trigger, proposer=f"skill:{skill.skill_id}")
        out.append((rank, proposal))
    return [proposal for _, proposal in sorted(out, key=lambda pair: pair[0])]


def _trains(spec: HarnessSpec, field_path: str, value: Any) -> bool:
    try:
        changed = spec.with_field(field_path, value)
        changed.to_grpo_settings()
    except UsageError:
        return False
    return changed != spec


def propose_from_skills(store: EventStore, branch: BranchRef, domain: str, library: SkillLibrary) -> list[StoredEvent]:
    """Record, on the branch, an InterventionProposed for each skill that fires on its last
    diagnosis (proposer skill:ID), all in one append; an empty list when none fires."""
    history = store.read_branch(branch)
    diagnosis = next((e for e in reversed(history) if e.type == "DiagnosisRecorded"), None)
    conditions = list(diagnosis.payload.get("conditions", [])) if diagnosis else []
    current = branch_harness(store, branch)
    events = current.unrecorded_default()
    for proposal in skill_candidates(store, current.spec, conditions, domain, library):
        designed = design_intervention(current.spec, {proposal.field: proposal.value},
                                       hypothesis=proposal.hypothesis, proposer=proposal.proposer)  # fmt: skip
        events.append(NewEvent.of(designed.event, idempotency_key=f"intervention:{designed.event.intervention_id}"))
    if not any(e.type == "InterventionProposed" for e in events):
        return []
    return [e for e in store.append(branch, events) if e.type == "InterventionProposed"]
