"""`evotrainer pending|approve|revise|abort`: answer the loop's human gates.

    evotrainer pending                                   # what waits, in every experiment
    evotrainer approve d-0123456789 --note "backtest looks right"
    evotrainer revise d-0123456789 --set grpo.temperature=1.2 --note "smaller step first"
    evotrainer abort d-0123456789 --actor alice

`evotrainer run` stops with exit status 4 at a gate (evolve/gates.py); each answer is a
DecisionRecorded on the experiment's main branch, by the OS user (or EVOTRAINER_ACTOR,
or --actor), and running the experiment again resumes from it. These commands are the
client's `pending`, `approve`, `revise` and `abort` plus formatting.
"""

from __future__ import annotations

import json

import typer

from evotrainer.cli.render import print_json, print_line, print_table
from evotrainer.client import connect
from evotrainer.client.results import GateDecision
from evotrainer.errors import UsageError

_ACTOR = typer.Option(None, "--actor", help="Who decides (default: EVOTRAINER_ACTOR, else the OS user@host).")
_NOTE = typer.Option("", "--note", help="Why, in a line; recorded with the decision.")


def pending_command(
    experiment: str = typer.Argument(None, help="Only this experiment's requests (default: every experiment's)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """The decisions the loop waits for at its human gates: request id, experiment, what
    waits and why."""
    with connect() as db:
        waiting = db.pending(experiment)
    if as_json:
        print_json([{**row, "asked_at": row["asked_at"].isoformat()} for row in waiting.records()])
        return
    if not waiting:
        print_line("nothing waits for a decision")
        return
    rows = [(r.request_id, r.experiment, f"{r.asked_at:%Y-%m-%d %H:%M}", r.waits_for) for r in waiting]
    print_table(["request", "experiment", "asked", "waits for"], rows)
    print_line("decide with `evotrainer approve ID`, `evotrainer revise ID --set FIELD=VALUE` or `evotrainer abort ID`")


def approve_command(
    ident: str = typer.Argument(..., metavar="ID", help="The request id (`evotrainer pending`)."),
    note: str = _NOTE,
    actor: str = _ACTOR,
) -> None:
    """Approve what a gate's request puts forward (the proposal, the intervention or the
    promotion); `evotrainer run` resumes from it."""
    with connect() as db:
        _say(db.approve(ident, note, actor))


def revise_command(
    ident: str = typer.Argument(..., metavar="ID", help="The request id (`evotrainer pending`)."),
    set_: list[str] = typer.Option([], "--set", help="FIELD=VALUE to run instead (exactly one; VALUE is JSON)."),
    note: str = _NOTE,
    actor: str = _ACTOR,
) -> None:
    """Answer a gate's request with your own single-field change (--set FIELD=VALUE) to run
    instead."""
    from evotrainer.cli.harness import _parse_set
    from evotrainer.harness.intervention import MultiFieldInterventionError

    changes = _parse_set(set_)
    if not changes:
        raise UsageError("revise needs the change to run instead: --set FIELD=VALUE")
    if len(changes) > 1:
        raise MultiFieldInterventionError(list(changes))
    [(field_path, value)] = changes.items()
    with connect() as db:
        _say(db.revise(ident, field_path, value, note, actor))


def abort_command(
    ident: str = typer.Argument(..., metavar="ID", help="The request id (`evotrainer pending`)."),
    note: str = _NOTE,
    actor: str = _ACTOR,
) -> None:
    """Decline what a gate's request puts forward: the change is not tried, the promotion
    not made."""
    with connect() as db:
        _say(db.abort(ident, note, actor))


def _say(done: GateDecision) -> None:
    change = f" ({', '.join(f'{k}={json.dumps(v)}' for k, v in done.changes.items())})" if done.changes else ""
    print_line(f"{done.decision} {done.request_id}{change} as {done.actor}: {done.request}")
    print_line(f"recorded DecisionRecorded at {done.recorded_at}; run the experiment again (`evotrainer run FILE`) "
               "to resume")  # fmt: skip
