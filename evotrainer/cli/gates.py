"""`evotrainer pending|approve|revise|abort`: answer the loop's human gates.

    evotrainer pending                                   # what waits, in every experiment
    evotrainer approve d-0123456789 --note "backtest looks right"
    evotrainer revise d-0123456789 --set grpo.temperature=1.2 --note "smaller step first"
    evotrainer abort d-0123456789 --actor alice

`evotrainer run` stops with exit status 4 at a gate (evolve/gates.py); each answer is a
DecisionRecorded on the experiment's main branch, by the OS user (or EVOTRAINER_ACTOR,
or --actor), and running the experiment again resumes from it.
"""

from __future__ import annotations

import json

import typer

from evotrainer.cli.render import print_json, print_line, print_table
from evotrainer.store import EventStore

_ACTOR = typer.Option(None, "--actor", help="Who decides (default: EVOTRAINER_ACTOR, else the OS user@host).")
_NOTE = typer.Option("", "--note", help="Why, in a line; recorded with the decision.")


def pending_command(
    experiment: str = typer.Argument(None, help="Only this experiment's requests (default: every experiment's)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """The decisions the loop waits for at its human gates: request id, experiment, what
    waits and why."""
    from evotrainer.evolve.gates import describe, pending
    from evotrainer.refs import check_name

    with EventStore.connect() as store:
        waiting = pending(store, check_name("experiment", experiment) if experiment else None)
    if as_json:
        print_json([{**e.payload, "experiment": e.experiment, "asked_at": e.recorded_at.isoformat()} for e in waiting])
        return
    if not waiting:
        print_line("nothing waits for a decision")
        return
    print_table(["request", "experiment", "asked", "waits for"],
                [(e.payload["request_id"], e.experiment, f"{e.recorded_at:%Y-%m-%d %H:%M}", describe(e.payload))
                 for e in waiting])  # fmt: skip
    print_line("decide with `evotrainer approve ID`, `evotrainer revise ID --set FIELD=VALUE` or `evotrainer abort ID`")


def approve_command(
    ident: str = typer.Argument(..., metavar="ID", help="The request id (`evotrainer pending`)."),
    note: str = _NOTE,
    actor: str = _ACTOR,
) -> None:
    """Approve what a gate's request puts forward (the proposal, the intervention or the
    promotion); `evotrainer run` resumes from it."""
    _decide(ident, "approved", [], note, actor)


def revise_command(
    ident: str = typer.Argument(..., metavar="ID", help="The request id (`evotrainer pending`)."),
    set_: list[str] = typer.Option([], "--set", help="FIELD=VALUE to run instead (exactly one; VALUE is JSON)."),
    note: str = _NOTE,
    actor: str = _ACTOR,
) -> None:
    """Answer a gate's request with your own single-field change (--set FIELD=VALUE) to run
    instead."""
    _decide(ident, "revised", set_, note, actor)


def abort_command(
    ident: str = typer.Argument(..., metavar="ID", help="The request id (`evotrainer pending`)."),
    note: str = _NOTE,
    actor: str = _ACTOR,
) -> None:
    """Decline what a gate's request puts forward: the change is not tried, the promotion
    not made."""
    _decide(ident, "aborted", [], note, actor)


def _decide(ident: str, decision: str, items: list[str], note: str, actor: str | None) -> None:
    from evotrainer.cli.harness import _parse_set
    from evotrainer.errors import UsageError
    from evotrainer.evolve.gates import describe, record_decision

    changes = _parse_set(items)
    if decision == "revised" and not changes:
        raise UsageError("revise needs the change to run instead: --set FIELD=VALUE")
    with EventStore.connect(actor=actor) as store:
        stored = record_decision(store, ident, decision, changes=changes, note=note.strip())  # type: ignore[arg-type]
        asked = next(e for e in store.read_branch(stored.ref) if e.event_id == stored.causation_id)
    change = f" ({', '.join(f'{k}={json.dumps(v)}' for k, v in changes.items())})" if changes else ""
    print_line(f"{decision} {ident}{change} as {stored.actor}: {describe(asked.payload)}")
    print_line(f"recorded DecisionRecorded at {stored.experiment}/{stored.branch}@{stored.seq}; "
               "run the experiment again (`evotrainer run FILE`) to resume")  # fmt: skip
