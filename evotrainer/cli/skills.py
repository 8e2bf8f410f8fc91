"""`evotrainer skills list|show|export|import|propose`: the skill library, and skills that travel.

    evotrainer skills list --domain math
    evotrainer skills show no_condition/grpo.learning_rate/raise
    evotrainer skills export skills.json            # or: skills export --format md > skills.md
    evotrainer skills import skills.json --into other
    evotrainer skills propose other/main            # firing skills propose their own change

A file that is not a valid skills file is refused with one line, and nothing is written.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from evotrainer.cli.render import print_json, print_line, print_table

app = typer.Typer(help="The skill library: list, show, export to a file, import from one, and let validated skills"
                  " propose their own change.", no_args_is_help=True)


@app.command("list")
def list_command(
    domain: str = typer.Option(None, help="Only skills tried in this domain (math, code, swe)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Every skill with its outcomes summed over every experiment, best record first."""
    from evotrainer.client import connect

    with connect() as client:
        table = client.skills(domain)
    if as_json:
        print_json(table.records())
        return
    rows = [(r.skill_id, r.successes, r.failures, "-" if r.mean_effect is None else f"{r.mean_effect:+.4f}",
             ", ".join(r.validated_in) or "-", "yes" if r.general else "no", r.imported) for r in table]  # fmt: skip
    print_table(["skill", "successes", "failures", "mean effect", "validated in", "general", "imported"], rows)


@app.command("show")
def show_command(
    skill_id: str = typer.Argument(..., help="TRIGGER/FIELD/DIRECTION, as `skills list` names it."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """One skill in METHOD.md's format, with the change that validated it and its provenance."""
    from evotrainer.client import connect

    with connect() as client:
        entry = client.skill(skill_id)
    if as_json:
        print_json(entry)
        return
    effect = "n/a" if entry["mean_effect"] is None else f"{entry['mean_effect']:+.4f}"
    print_line(f"skill {entry['skill_id']} ({entry['category']})")
    print_line(f"  trigger           {entry['trigger']}")
    print_line(f"  intervention      {entry['intervention']}")
    print_line(f"  expected outcome  {entry['expected_outcome']}")
    print_line(f"  validation        {entry['successes']} successes, {entry['failures']} failures, "
               f"mean effect {effect}")  # fmt: skip
    print_line(f"  domains           validated in {', '.join(entry['validated_in']) or 'none'}; "
               f"tried in {', '.join(entry['tried_in']) or 'none'}" + (" (general)" if entry["general"] else ""))
    for source in entry["imported_from"]:
        print_line(f"  imported from     {source['file']} (sha256 {source['file_sha256'][:12]}, "
                   f"exported {source.get('exported_at')})")  # fmt: skip


@app.command("export")
def export_command(
    file: Path = typer.Argument(None, help="Where to write it (default: standard output)."),
    format: str = typer.Option("json", "--format", help="json (what `skills import` reads) or md (for people)."),
    domain: str = typer.Option(None, help="Only skills tried in this domain."),
) -> None:
    """Write the skill library as a skills file: trigger, intervention, expected outcome,
    validation counts, effect sizes, domains, and the change that validated each."""
    from evotrainer.client import connect

    with connect() as client:
        text = client.export_skills(domain, format)
    if file is None:
        typer.echo(text, nl=False)
        return
    file.write_text(text, encoding="utf-8")
    count = len(json.loads(text)["skills"]) if format == "json" else text.count("\n## ")
    print_line(f"{count} skills written to {file}")


@app.command("import")
def import_command(
    file: Path = typer.Argument(..., help="A JSON skills file (`skills export`)."),
    into: str = typer.Option(..., "--into", help="The experiment whose main records the SkillImported events."),
) -> None:
    """Record every skill of a skills file as SkillImported on EXPERIMENT/main, with the
    file and where it came from; a file that does not validate is refused whole."""
    from evotrainer.client import connect

    with connect() as client:
        events = client.import_skills(file, into)
    for e in events:
        print_line(f"{e.experiment}/{e.branch}@{e.seq} SkillImported {e.payload['skill_id']}")
    print_line(f"{len(events)} skills imported from {file} into {into}/main")


@app.command("propose")
def propose_command(
    ref: str = typer.Argument(..., help="EXPERIMENT/BRANCH whose last diagnosis the skills answer."),
    domain: str = typer.Option(None, help="Task domain (default: the experiment's own)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Let every validated skill whose trigger fires on the branch's last diagnosis propose
    its own change (InterventionProposed, proposer skill:ID)."""
    import dataclasses

    from evotrainer.client import connect

    with connect() as client:
        proposals = client.propose_from_skills(ref, domain)
    if as_json:
        print_json([dataclasses.asdict(p) for p in proposals])
        return
    if not proposals:
        print_line(f"no validated skill fires on {ref}'s last diagnosis")
    for p in proposals:
        print_line(f"intervention {p.intervention_id} recorded at seq {p.recorded_seq} by {p.proposer}")
        print_line(f"  change      {p.field}: {json.dumps(p.old_value)} -> {json.dumps(p.new_value)}")
        print_line(f"  hypothesis  {p.hypothesis}")
