"""`evotrainer db`: where the event store is and which schema revision it has."""

from __future__ import annotations

import typer

from evotrainer.cli.render import print_json

app = typer.Typer(help="The event store's database: URL, schema revision, upgrades.", no_args_is_help=True)


@app.command("url")
def url_command() -> None:
    """Print the database URL (starting the embedded server if none is configured)."""
    from evotrainer.store.database import database_url

    typer.echo(database_url())


@app.command("upgrade")
def upgrade_command() -> None:
    """Apply every pending Alembic revision (also done automatically on first use)."""
    from evotrainer.store import migrate
    from evotrainer.store.database import database_url

    url = database_url()
    before = migrate.current_revision(url)
    migrate.upgrade(url)
    after = migrate.current_revision(url)
    typer.echo(f"schema at revision {after}" + (" (was {})".format(before or "empty") if before != after else ""))


@app.command("status")
def status_command(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Show the database, its schema revision and how many branches and events it holds."""
    import psycopg

    from evotrainer import config
    from evotrainer.store import migrate
    from evotrainer.store.database import database_url

    url = database_url()
    revision = migrate.current_revision(url)
    counts = {"branches": None, "events": None}
    if revision is not None:
        with psycopg.connect(url, autocommit=True) as conn:
            for table in counts:
                counts[table] = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]  # type: ignore[index]
    status = {
        "url": url,
        "embedded": config.database_url_override() is None,
        "revision": revision,
        "head": migrate.head_revision(),
        "up_to_date": revision == migrate.head_revision(),
        **counts,
    }
    if as_json:
        print_json(status)
        return
    for key, value in status.items():
        typer.echo(f"{key:<11} {value}")


@app.command("stop")
def stop_command() -> None:
    """Stop the embedded Postgres (it restarts on the next command that needs it)."""
    from evotrainer import config
    from evotrainer.store.embedded import EmbeddedPostgres

    if config.database_url_override():
        typer.echo("EVOTRAINER_DATABASE_URL is set: there is no embedded server to stop")
        return
    EmbeddedPostgres().stop()
    typer.echo("embedded Postgres stopped")
