"""Skills that travel: the library written to a file, and a file read into another record.

    evotrainer skills export --format json > skills.json     # or --format md, for people
    evotrainer skills import skills.json --into other         # SkillImported on other/main

A skills file holds METHOD.md's skill format, one entry per skill: trigger, intervention,
expected outcome, validation counts (successes, failures), effect sizes, the domains it
was validated and tried in, and the change that validated it (field, old value, new
value), which is what lets the skill propose itself in the record it is imported into
(evolve/skill_proposals.py). Importing is never a silent merge: each skill becomes one
SkillImported event naming the file (and its sha256) and where it was exported from, all
of the file's skills in one append; a file that does not validate is refused whole, with
one line saying where, and nothing is written. Importing the same file again is a no-op.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from evotrainer.errors import UsageError
from evotrainer.events import SkillImported
from evotrainer.evolve.promotion import intervention_of
from evotrainer.evolve.skills import Skill, SkillLibrary, direction
from evotrainer.refs import BranchRef, check_name
from evotrainer.store import EventStore, NewEvent, StoredEvent

FORMAT = "evotrainer-skills"
VERSION = 1


def skill_change(store: EventStore, skill: Skill) -> dict[str, Any] | None:
    """The change that validated the skill: that of the newest candidate promoted under it
    here (its InterventionProposed), else the one its import carried; None when neither."""
    for candidate in reversed(skill.succeeded_on):
        try:
            ref = BranchRef.parse(candidate, allow_seq=False)
            proposed = intervention_of(store.read_branch(ref), ref)
        except UsageError:
            continue  # a key this version of promotion.py did not write
        if proposed is not None:
            p = proposed.payload
            return {"field": p["field"], "old_value": p.get("old_value"), "new_value": p["new_value"]}
    return skill.imported_change


def skill_entry(store: EventStore, skill: Skill) -> dict[str, Any]:
    """One skill as a skills file holds it."""
    change = skill_change(store, skill)
    intervention = (f"{change['field']}: {change['old_value']!r} -> {change['new_value']!r}" if change
                    else f"{skill.field_path}: {skill.way}")  # fmt: skip
    return {
        "skill_id": skill.skill_id, "trigger": skill.trigger, "intervention": intervention,
        "expected_outcome": skill.expected_outcome, "category": skill.category,
        "successes": skill.successes, "failures": skill.failures, "effect_sizes": skill.effects,
        "mean_effect": skill.mean_effect, "validated_in": sorted(skill.validated_in),
        "tried_in": sorted(skill.tried_in), "general": skill.general, "change": change,
        "imported_from": skill.imported_from,
    }  # fmt: skip


def export_document(store: EventStore, library: SkillLibrary, domain: str | None = None) -> dict[str, Any]:
    """The library (only skills tried in `domain`'s family, when given) as a skills file;
    skills with no known change cannot propose anywhere and are left out."""
    family = domain.split(":", 1)[0] if domain else None
    entries = [skill_entry(store, skill) for _, skill in sorted(library.skills.items())
               if family is None or family in skill.tried_in]  # fmt: skip
    experiments = sorted({info.experiment for info in store.branches()})
    return {"format": FORMAT, "version": VERSION, "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "exported_from": {"experiments": experiments},
            "skills": [e for e in entries if e["change"] is not None]}  # fmt: skip


def render_markdown(document: dict[str, Any]) -> str:
    """A skills file for people: one section per skill, METHOD.md's fields in order."""
    lines = [f"# Skills ({len(document['skills'])})", ""]
    for s in document["skills"]:
        effect = "n/a" if s["mean_effect"] is None else f"{s['mean_effect']:+.4f}"
        lines += [f"## {s['skill_id']}", "",
                  f"- trigger: {s['trigger']}", f"- intervention: {s['intervention']}",
                  f"- expected outcome: {s['expected_outcome']}",
                  f"- validation: {s['successes']} successes, {s['failures']} failures, mean effect {effect}",
                  f"- domains: validated in {', '.join(s['validated_in']) or 'none'}; "
                  f"tried in {', '.join(s['tried_in']) or 'none'}" + (" (general)" if s["general"] else ""),
                  f"- category: {s['category']}", ""]  # fmt: skip
    return "\n".join(lines)


def parse_skills_file(text: str, name: str) -> list[SkillImported]:
    """The skills of a JSON skills file as SkillImported events, every one validated; a
    UsageError naming the first problem otherwise."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{name} is not JSON ({exc.msg} at line {exc.lineno}): export with --format json") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise UsageError(f"{name} is not an evotrainer skills file (no \"format\": \"{FORMAT}\")")
    if document.get("version") != VERSION:
        raise UsageError(f"{name} is a skills file of version {document.get('version')!r}; this reads {VERSION}")
    entries = document.get("skills")
    if not isinstance(entries, list) or not entries:
        raise UsageError(f"{name} holds no skills")
    source = {"file": Path(name).name, "file_sha256": hashlib.sha256(text.encode()).hexdigest(),
              "exported_from": document.get("exported_from", {}),
              "exported_at": document.get("exported_at")}  # fmt: skip
    return [_imported(entry, i, name, source) for i, entry in enumerate(entries)]


def _imported(entry: Any, index: int, name: str, source: dict[str, Any]) -> SkillImported:
    where = f"{name}: skill {index + 1}"
    if not isinstance(entry, dict):
        raise UsageError(f"{where} is not an object")
    fields = {k: entry.get(k) for k in ("skill_id", "trigger", "intervention", "expected_outcome", "category",
                                        "successes", "failures", "effect_sizes", "validated_in", "tried_in",
                                        "change")}  # fmt: skip
    try:
        event = SkillImported.model_validate({**fields, "source": source})
    except ValidationError as exc:
        first = exc.errors()[0]
        at = ".".join(str(part) for part in first["loc"])
        raise UsageError(f"{where} ({entry.get('skill_id', '?')}): {at}: {first['msg']}") from None
    trigger, field_path, way = event.skill_id.split("/", 2)
    change = event.change
    if trigger != event.trigger or change.get("field") != field_path or "new_value" not in change:
        raise UsageError(f"{where} ({event.skill_id}): its change must name field {field_path} and a new_value, "
                         f"and its trigger must be {trigger}")  # fmt: skip
    if direction(change.get("old_value"), change["new_value"]) != way:
        raise UsageError(f"{where} ({event.skill_id}): its change {change.get('old_value')!r} -> "
                         f"{change['new_value']!r} does not {way} the field")  # fmt: skip
    if event.successes and not event.validated_in:
        raise UsageError(f"{where} ({event.skill_id}): successes without a domain it was validated in")
    return event


def import_skills(store: EventStore, experiment: str, text: str, name: str) -> list[StoredEvent]:
    """Record every skill of the file on EXPERIMENT/main as SkillImported, in one append
    (all or nothing); the events already recorded when the same file was imported before."""
    check_name("experiment", experiment)
    main = BranchRef(experiment, "main")
    store.branch(main)  # NotFoundError before anything is parsed into events
    events = parse_skills_file(text, name)
    digest = events[0].source["file_sha256"]
    return store.append(main, [NewEvent.of(e, idempotency_key=f"skill-import:{digest}:{e.skill_id}")
                               for e in events])  # fmt: skip
