"""The `evotrainer` command line: the edge where library errors become one clear line.

Every command group lives in its own module; this one mounts them and runs the app with
click's standalone mode off, so that usage errors and EvotrainerError alike end as one
line on stderr and a non-zero exit code, never a traceback.
"""

from __future__ import annotations

import sys

import typer

from evotrainer.cli import audit, db, domains, events, evolve, experiment, fleet, harness, lineage, schemas, train
from evotrainer.errors import EvotrainerError

app = typer.Typer(
    name="evotrainer",
    help="Event-sourced experiment database and worker fleet for autonomous RL training.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# Typer may vendor its own click; take its exception classes from Typer itself.
ClickException: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")

app.add_typer(db.app, name="db")
app.add_typer(experiment.app, name="experiment")
app.add_typer(events.app, name="events")
app.add_typer(schemas.app, name="schemas")
app.add_typer(harness.app, name="harness")
app.command("audit")(audit.audit_command)
app.command("anchor")(audit.anchor_command)
app.command("fork")(experiment.fork_command)
app.command("train")(train.train_command)
app.command("evaluate")(train.evaluate_command)
app.command("sql")(lineage.sql_command)
app.command("log")(lineage.log_command)
app.command("lineage")(lineage.lineage_command)
app.command("replay")(lineage.replay_command)
app.command("diagnose")(harness.diagnose_command)
app.command("propose")(harness.propose_command)
app.command("backtest")(harness.backtest_command)
app.command("promote")(evolve.promote_command)
app.command("run")(evolve.run_command)
app.command("compare")(evolve.compare_command)
app.command("status")(evolve.status_command)
app.add_typer(domains.app, name="domains")
fleet.mount(app)


def main(argv: list[str] | None = None) -> int:
    command = typer.main.get_command(app)
    try:
        # Without standalone mode, click returns the code of a `typer.Exit` instead of raising.
        code = command.main(args=argv, prog_name="evotrainer", standalone_mode=False)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.Abort:
        print("evotrainer: aborted", file=sys.stderr)
        return 130
    except ClickException as exc:
        print(f"evotrainer: error: {exc.format_message()}", file=sys.stderr)  # type: ignore[attr-defined]
        return 2
    except EvotrainerError as exc:
        print(f"evotrainer: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:
        return 0
    return code if isinstance(code, int) else 0


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
