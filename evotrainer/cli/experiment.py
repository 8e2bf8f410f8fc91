"""`evotrainer experiment create` and `evotrainer fork`: starting lines of history."""

from __future__ import annotations

import typer

from evotrainer.cli.payloads import parse_payload
from evotrainer.cli.render import print_json
from evotrainer.errors import UsageError
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore

app = typer.Typer(help="Experiments: each starts as EXPERIMENT/main.", no_args_is_help=True)


@app.command("create")
def create_command(
    name: str = typer.Argument(..., help="Experiment name (letters, digits, '.', '_', '-')."),
    domain: str = typer.Option(None, help="Task domain: math, code or swe."),
    description: str = typer.Option("", help="What the experiment is for."),
    config: str = typer.Option(None, help="Extra configuration as JSON or @FILE."),
) -> None:
    """Create NAME/main, whose first event is ExperimentCreated; prints that event as JSON."""
    payload = {"description": description}
    if domain is not None:
        payload["domain"] = domain
    if config is not None:
        payload["config"] = parse_payload(config)
    with EventStore.connect() as store:
        print_json(store.create_experiment(name, payload).to_json())


def fork_command(
    source: str = typer.Argument(..., help="EXPERIMENT/BRANCH@SEQ to fork from (the head without @SEQ)."),
    new_branch: str = typer.Argument(..., help="Name of the new branch."),
    reason: str = typer.Option("", help="Why this line is started."),
    intervention: str | None = typer.Option(
        None, help="Run the new branch under this intervention's harness (proposed on SOURCE; backtested if it can be)."
    ),
) -> None:
    """Start NEW_BRANCH sharing the first SEQ events of SOURCE; prints its BranchForked event
    (with --intervention, a JSON array: BranchForked, then the HarnessVersioned it runs under)."""
    ref = BranchRef.parse(source)
    with EventStore.connect() as store:
        if intervention is None:
            print_json(store.fork(ref, new_branch, reason).to_json())
            return
        if reason:
            raise UsageError("--reason and --intervention do not go together: the intervention is the reason")
        from evotrainer.evolve import fork_for_intervention

        forked = fork_for_intervention(store, ref, new_branch, intervention)
        print_json([forked.forked.to_json(), forked.harness.to_json()])
