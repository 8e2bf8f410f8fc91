"""`evotrainer domains`: list the task domains, show sample tasks, score given completions.

evotrainer domains list [--json]
evotrainer domains sample math:digit_add --n 3 --split train --seed 0 [--json]
evotrainer domains score math:file=gsm8k.jsonl --completions answers.jsonl [--json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from evotrainer.cli.render import print_line, print_table
from evotrainer.domains import Domain, get_domain, list_domains
from evotrainer.errors import UsageError

app = typer.Typer(
    help="Task domains (math, code, swe): list them, show sample tasks, score completions.", no_args_is_help=True
)


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


@app.command("score")
def score_command(
    domain: Annotated[str, typer.Argument(help="Domain name: math:file=PATH, code:column_add, ... (as for sample).")],
    completions: Annotated[Path, typer.Option("--completions", help=(
        'JSONL, one {"task_id": ..., "completion": ...} per line.'))],
    harness: Annotated[str | None, typer.Option("--harness", metavar="EXPERIMENT/BRANCH", help=(
        "Weigh components as this branch's harness does (default: the default harness).")) ] = None,
    weight: Annotated[list[str] | None, typer.Option("--weight", metavar="COMPONENT=W", help=(
        "Set one reward weight (repeatable), on top of the harness.")) ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
) -> None:
    """Score given completions with the domain's real reward: every component, the total as
    training weighs it, and what the grade rests on (per-test statuses, tampering) where the
    domain reports it. Task ids are a file's own ids, or the ids `domains sample` prints for
    the same DOMAIN name (generated ids name their split, seed and index). Every line is
    checked before anything is scored: a bad line is one error and exit 2, no scores."""
    from evotrainer.domains.scoring import read_completions, score_all

    scoring_domain = get_domain(domain)
    settings = _settings(harness, weight or [], scoring_domain)
    jobs = read_completions(completions, scoring_domain)
    rows = score_all(scoring_domain, settings, jobs)
    if as_json:
        for row in rows:
            sys.stdout.write(json.dumps(row, sort_keys=True, ensure_ascii=False) + "\n")
        return
    _print_scores(rows, scoring_domain.reward_components)


def _settings(harness: str | None, weights: list[str], domain: Domain) -> Any:
    """The GRPO settings whose reward weights training would use (checked against the domain)."""
    from evotrainer.harness.spec import HarnessSpec
    from evotrainer.training.grpo_trainer import check_reward_weights

    spec = HarnessSpec()
    if harness is not None:
        from evotrainer.harness.versions import branch_harness
        from evotrainer.refs import BranchRef
        from evotrainer.store import EventStore

        with EventStore.connect() as store:
            spec = branch_harness(store, BranchRef.parse(harness)).spec
    for item in weights:
        component, eq, value = item.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = None
        if not eq or not component or number is None:
            raise UsageError(f"--weight {item!r}: use COMPONENT=NUMBER, e.g. format=0.1")
        spec = spec.with_field(f"rewards.weights.{component}", number)
    settings = spec.to_grpo_settings()
    check_reward_weights(domain, settings)
    return settings


def _print_scores(rows: list[dict[str, Any]], components: tuple[str, ...]) -> None:
    extra = sorted({k for r in rows for k in r if k not in ("task_id", "reward", "components", "tests")})
    table = [
        (r["task_id"], f"{r['reward']:g}", *(f"{r['components'].get(c, 0.0):g}" for c in components),
         *(_cell(r.get(k)) for k in extra))
        for r in rows
    ]  # fmt: skip
    print_table(["task_id", "reward", *components, *extra], table)
    tests = [(r["task_id"], test, status) for r in rows for test, status in sorted((r.get("tests") or {}).items())]
    if tests:
        print_line()
        print_table(["task_id", "test", "status"], tests)
    if rows:
        mean = sum(r["reward"] for r in rows) / len(rows)
        print_line(f"\n{len(rows)} completion{'s' if len(rows) > 1 else ''}, mean reward {mean:.4g}")


def _cell(value: Any) -> str:
    return "" if value is None else value if isinstance(value, str) else json.dumps(value)
