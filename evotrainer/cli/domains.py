"""`evotrainer domains`: list the task domains and show sample tasks.

evotrainer domains list [--json]
evotrainer domains sample math:digit_add --n 3 --split train --seed 0 [--json]
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from evotrainer.domains import get_domain, list_domains
from evotrainer.errors import UsageError

app = typer.Typer(help="Task domains (math, code, swe): list them and show sample tasks.", no_args_is_help=True)


@app.command("list")
def list_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """List each domain with its variants (levels or sources) and reward components."""
    infos = list_domains()
    if as_json:
        rows = [
            {"name": i.name, "description": i.description, "variants": list(i.variants),
             "splits": ["train", "eval"], "reward_components": list(i.reward_components)}
            for i in infos
        ]  # fmt: skip
        typer.echo(json.dumps(rows, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("domain", "variants (name:variant)", "splits", "reward components", "description")
    for i in infos:
        table.add_row(i.name, ", ".join(i.variants), "train, eval", ", ".join(i.reward_components), i.description)
    Console().print(table)


@app.command("sample")
def sample_command(
    domain: Annotated[str, typer.Argument(help="Domain name, optionally name:variant (e.g. math:digit_add).")],
    n: Annotated[int, typer.Option("--n", help="How many tasks to show.")] = 3,
    split: Annotated[str, typer.Option("--split", help="train or eval.")] = "train",
    seed: Annotated[int, typer.Option("--seed", help="Seed of the split.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
) -> None:
    """Show the first N tasks of a domain's split: prompt and reference."""
    if split not in ("train", "eval"):
        raise UsageError(f"split must be train or eval, not {split!r}")
    if n < 1:
        raise UsageError("--n must be at least 1")
    tasks = get_domain(domain).tasks(split, n, seed)  # type: ignore[arg-type]
    if as_json:
        rows = [{"task_id": t.task_id, "level": t.level, "prompt": t.prompt, "reference": t.reference} for t in tasks]
        typer.echo(json.dumps(rows, indent=2))
        return
    for t in tasks:
        typer.echo(f"== {t.task_id} [{t.level}]")
        typer.echo(t.prompt.rstrip("\n"))
        typer.echo(f"-- reference:\n{t.reference.rstrip()}\n")
