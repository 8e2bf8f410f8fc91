"""`evotrainer schemas export`: write the event catalogue's JSON Schemas."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(help="JSON Schemas of the event catalogue.", no_args_is_help=True)


@app.command("export")
def export_command(
    directory: Path = typer.Argument(Path("schemas"), help="Where to write <Type>.v<N>.json."),
) -> None:
    """Write one schema file per event type and version."""
    from evotrainer.events.schemas import export

    for path in export(directory):
        typer.echo(str(path))
