"""The `evotrainer` command line: the edge where library errors become one clear line.

Every command group lives in its own module, and a module is imported only when one of
its commands runs (evotrainer/cli/lazy.py): `evotrainer sql` loads the lineage commands
and the store, not the training, fleet or evolve code, nor the event models. COMMANDS
says where each command lives and what `evotrainer --help` says of it, so the help lists
every command without importing any (a test checks the two agree). Help is plain text:
Rich's formatting cost more to import than the rest of a command's start.

The app runs with click's standalone mode off, so that usage errors and EvotrainerError
alike end as one line on stderr and a non-zero exit code, never a traceback.
"""

from __future__ import annotations

import sys

import typer

from evotrainer.cli.lazy import CommandSpec, LazyGroup
from evotrainer.errors import EvotrainerError
from evotrainer.offline import go_offline

HELP = "Event-sourced experiment database and worker fleet for autonomous RL training."


def _spec(where: str, summary: str) -> CommandSpec:
    module, _, attribute = where.partition(":")
    return CommandSpec(f"evotrainer.cli.{module}", attribute, summary)


# In the order `evotrainer --help` lists them: commands, then command groups.
COMMANDS: dict[str, CommandSpec] = {
    "audit": _spec("audit:audit_command", "Verify hash chains and every signed anchor (`evotrainer anchor`)."),
    "anchor": _spec("audit:anchor_command", "Sign every branch head with this machine's anchor key"
                    " (EVOTRAINER_HOME/anchor-key.pem, or EVOTRAINER_ANCHOR_KEY; created on first use) and store"
                    " the anchors, after checking that the record audits intact."),
    "fork": _spec("experiment:fork_command", "Start NEW_BRANCH sharing the first SEQ events of SOURCE; prints its"
                  " BranchForked event (with --intervention, a JSON array: BranchForked, then the HarnessVersioned"
                  " it runs under)."),
    "train": _spec("train:train_command", "Request a GRPO run of the branch's policy under the branch's harness"
                   " (a `train` task) and, without a broker, run it here."),
    "evaluate": _spec("train:evaluate_command", "Request Avg@k on the held-out split (an `evaluate` task) and,"
                      " without a broker, run it here: under the branch harness's evaluation protocol unless"
                      " options override it."),
    "sql": _spec("lineage:sql_command", "Query the lineage in SQL, read-only (views: lineage_edges, branch_heads,"
                 " promotion_audit, ...)."),
    "log": _spec("lineage:log_command", "The effective history of a branch (inherited prefix included), one line"
                 " per event."),
    "lineage": _spec("lineage:lineage_command", "The branch tree: each branch's fork point, status (incumbent: the"
                     " best so far; start, promoted, rejected, running: not decided yet), head and scores."),
    "replay": _spec("lineage:replay_command", "Re-execute the branch's recorded train, evaluate, diagnose and"
                    " backtest tasks and compare their outputs hash for hash, and name every result that no task"
                    " or command produced as unverifiable (or, with --projections, rebuild the projections); exit 0"
                    " identical, 1 at the first difference or when a result is unverifiable."),
    "diagnose": _spec("harness:diagnose_command", "Three-layer diagnosis of a branch's latest rollout evidence under"
                      " its harness."),
    "propose": _spec("harness:propose_command", "Propose a single-factor intervention on the branch's harness"
                     " (InterventionProposed)."),
    "backtest": _spec("harness:backtest_command", "Replay an intervention on stored evidence and judge it against"
                      " its criterion."),
    "promote": _spec("evolve:promote_command", "Promote a branch if it beats the best so far by the gate's margin"
                     " with no blocking diagnostic."),
    "run": _spec("evolve:run_command", "Run the evolve loop on an experiment, or resume it from its log: train,"
                 " diagnose, propose, backtest, fork, evaluate and promote until the budget or the ideas run out."),
    "compare": _spec("evolve:compare_command", "Run the loop and the fixed recipe (the starting harness, never"
                     " changed) at equal GRPO steps for each seed, score both final policies on the held-out test"
                     " half, and record the gain with its bootstrap interval (resumable: run it again after a kill)."),
    "status": _spec("evolve:status_command", "The experiment's GRPO step budget (spent, left), each branch's steps,"
                    " verdict and selection score, the best so far, the tasks running now and the human decisions the"
                    " loop waits for."),
    "ui": _spec("ui:ui_command", "Serve the read-only dashboard: experiments, lineage graphs, branches, audits."),
    "report": _spec("ui:report_command", "Write a static HTML report of an experiment (its graph, one page per"
                    " branch)."),
    "worker": _spec("fleet:worker_command", "Run a worker: consume the fleet's queues and run the tasks (in-process"
                    " without a broker)."),
    "dispatcher": _spec("fleet:dispatcher_command", "Hand requested tasks to the broker and requeue tasks whose"
                        " worker vanished."),
    "tasks": _spec("fleet:tasks_command", "List requested, queued, running, completed and failed tasks with their"
                   " worker and attempts."),
    "pending": _spec("gates:pending_command", "The decisions the loop waits for at its human gates: request id,"
                     " experiment, what waits and why."),
    "approve": _spec("gates:approve_command", "Approve what a gate's request puts forward (the proposal, the"
                     " intervention or the promotion); `evotrainer run` resumes from it."),
    "revise": _spec("gates:revise_command", "Answer a gate's request with your own single-field change"
                    " (--set FIELD=VALUE) to run instead."),
    "abort": _spec("gates:abort_command", "Decline what a gate's request puts forward: the change is not tried,"
                   " the promotion not made."),
    "db": _spec("db:app", "The event store's database: URL, schema revision, upgrades."),
    "experiment": _spec("experiment:app", "Experiments: each starts as EXPERIMENT/main."),
    "events": _spec("events:app", "Append events to a branch and list them."),
    "schemas": _spec("schemas:app", "JSON Schemas of the event catalogue."),
    "harness": _spec("harness:app", "Show, compare and record harness versions."),
    "domains": _spec("domains:app", "Task domains (math, code, swe): list them, show sample tasks, score completions."),
    "skills": _spec("skills:app", "The skill library: list, show, export to a file, import from one, and let"
                    " validated skills propose their own change."),
    "mcp": _spec("agents:mcp_command", "Serve evotrainer to agents over MCP (stdio, or streamable HTTP): tools"
                 " for the lineage, SQL, diagnose, propose, backtest, fork, train, evaluate, promote, audit,"
                 " replay and skills."),
}


def root_command() -> LazyGroup:
    return LazyGroup(COMMANDS, name="evotrainer", help=HELP, no_args_is_help=True, rich_markup_mode=None)


# Typer may vendor its own click; take its exception classes from Typer itself.
ClickException: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


def main(argv: list[str] | None = None) -> int:
    go_offline()  # before any command imports a library of Hugging Face's (evotrainer.offline)
    command = root_command()
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
