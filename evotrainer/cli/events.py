"""`evotrainer events`: append to and list a branch's history."""

from __future__ import annotations

import typer

from evotrainer.cli.payloads import parse_payload
from evotrainer.cli.render import print_json
from evotrainer.errors import UsageError
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore

app = typer.Typer(help="Append events to a branch and list them.", no_args_is_help=True)


@app.command("append")
def append_command(
    ref: str = typer.Argument(..., help="EXPERIMENT/BRANCH"),
    event_type: str = typer.Option(..., "--type", help="Event type, e.g. TaskRequested."),
    payload: str = typer.Option(..., help="Payload as JSON, or @FILE."),
    expected_seq: int = typer.Option(None, help="Refuse unless the branch head is at this seq."),
    idempotency_key: str = typer.Option(None, help="Append at most once per branch with this key."),
    causation_id: str = typer.Option(None, help="Event id that caused this one."),
    correlation_id: str = typer.Option(None, help="Id shared by a whole conversation of events."),
) -> None:
    """Validate and append one event; prints the stored event as JSON."""
    from evotrainer.store import NewEvent

    branch = BranchRef.parse(ref, allow_seq=False)
    body = parse_payload(payload)
    if not isinstance(body, dict):
        raise UsageError("the payload must be a JSON object")
    event = NewEvent(event_type, body, idempotency_key, causation_id, correlation_id)
    with EventStore.connect() as store:
        print_json(store.append(branch, [event], expected_seq=expected_seq)[0].to_json())


@app.command("list")
def list_command(
    ref: str = typer.Argument(..., help="EXPERIMENT/BRANCH, or EXPERIMENT/BRANCH@SEQ to stop there."),
    as_json: bool = typer.Option(False, "--json", help="Print the stored events as JSON."),
) -> None:
    """List the branch's effective history, inherited prefix included."""
    from evotrainer.cli.lineage import print_history

    print_history(ref, as_json, full=True)
