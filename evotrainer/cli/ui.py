"""`evotrainer ui` (the read-only dashboard) and `evotrainer report` (a static copy of an
experiment's pages). Starlette and uvicorn are imported inside the commands only."""

from __future__ import annotations

import ipaddress
import secrets
from pathlib import Path

import typer

from evotrainer.errors import UsageError
from evotrainer.refs import check_name
from evotrainer.store import EventStore


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def ui_command(
    host: str = typer.Option("127.0.0.1", help="Address to bind; anything but loopback needs --allow-remote."),
    port: int = typer.Option(8765, help="Port to listen on."),
    allow_remote: bool = typer.Option(False, "--allow-remote", help="Allow a non-loopback --host (needs a token)."),
    token: str = typer.Option(None, "--token", help="Require this token on every request (generated and printed"
                              " for a non-loopback host when not given)."),
    poll_ms: int = typer.Option(2000, help="How often live pages check the record for news, in milliseconds."),
) -> None:
    """Serve the read-only dashboard: experiments, lineage graphs, branches, audits."""
    if not 0 < port < 65536:
        raise UsageError(f"bad --port {port}: use 1-65535")
    if poll_ms < 100:
        raise UsageError("--poll-ms must be at least 100")
    remote = not is_loopback(host)
    if remote and not allow_remote:
        raise UsageError(f"--host {host} is not loopback: add --allow-remote (every request then needs a token)")
    if token is not None and len(token) < 16:
        raise UsageError("--token must be at least 16 characters")
    if remote and token is None:
        token = secrets.token_urlsafe(24)
    import uvicorn

    from evotrainer.store.database import ensure_database
    from evotrainer.ui.app import create_app

    url = ensure_database()
    with EventStore.connect(url):  # fail here, in one line, when the store is unreachable
        pass
    app = create_app(url, token=token, poll_ms=poll_ms)
    shown = f"[{host}]" if ":" in host else host
    typer.echo(f"evotrainer dashboard (read-only) at http://{shown}:{port}/" + (f"?token={token}" if token else ""))
    uvicorn.run(app, host=host, port=port, log_level="warning")


def report_command(
    experiment: str = typer.Argument(..., help="The experiment to report."),
    out: Path = typer.Option(..., "--out", help="Directory to write index.html and the branch pages into."),
) -> None:
    """Write a static HTML report of an experiment (its graph, one page per branch)."""
    from evotrainer.ui.report import write_report

    check_name("experiment", experiment)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file, not a directory")
    with EventStore.connect() as store:
        written = write_report(store, experiment, out)
    typer.echo(f"wrote {len(written)} pages to {out}; open {out / 'index.html'}")
