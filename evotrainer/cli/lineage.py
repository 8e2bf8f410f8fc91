"""`evotrainer sql`, `log`, `lineage` and `replay`: asking the lineage questions, and
checking that the record re-computes (`replay`) and re-projects (`replay --projections`)."""

from __future__ import annotations

import csv
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import typer

from evotrainer.cli.render import print_json, print_table, summarize
from evotrainer.errors import UsageError
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, StoredEvent

if TYPE_CHECKING:
    from evotrainer.fleet.replay import ReplayedTask
    from evotrainer.fleet.tolerance import Tolerances


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def sql_command(
    query: str = typer.Argument(None, help="One read-only query (SELECT, WITH, VALUES, TABLE, EXPLAIN, SHOW)."),
    file: typer.FileText = typer.Option(None, "--file", help="Read the query from a file (- for stdin)."),
    as_json: bool = typer.Option(False, "--json", help="Rows as JSON objects."),
    as_csv: bool = typer.Option(False, "--csv", help="Rows as CSV."),
    timeout_ms: int = typer.Option(30_000, help="Statement timeout in milliseconds."),
) -> None:
    """Query the lineage in SQL, read-only (views: lineage_edges, branch_heads, promotion_audit, ...)."""
    from evotrainer.client import connect

    if (query is None) == (file is None):
        raise UsageError("give a QUERY or --file, not both and not neither")
    if as_json and as_csv:
        raise UsageError("choose one of --json and --csv")
    text = query if query is not None else file.read()
    with connect() as client:
        result = client.sql(text, timeout_ms=timeout_ms)
    rows = [[_plain(v) for v in row] for row in result.rows]
    if as_json:
        print_json([dict(zip(result.columns, row, strict=True)) for row in rows])
    elif as_csv:
        writer = csv.writer(sys.stdout)
        writer.writerow(result.columns)
        writer.writerows(rows)
    else:
        print_table(result.columns, rows)


def log_command(
    ref: str = typer.Argument(..., help="EXPERIMENT/BRANCH or EXPERIMENT/BRANCH@SEQ."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (one summary object per event)."),
) -> None:
    """The effective history of a branch (inherited prefix included), one line per event."""
    print_history(ref, as_json, full=False)


def print_history(ref: str, as_json: bool, full: bool) -> None:
    """The table `log` and `events list` share; JSON is the whole event when `full`."""
    from evotrainer.client import connect

    with connect() as client:
        history = client.events(ref).rows
    if as_json:
        print_json([
            e.to_json() if full else
            {"seq": e.seq, "branch": f"{e.experiment}/{e.branch}", "type": e.type, "actor": e.actor,
             "recorded_at": e.recorded_at.isoformat(), "summary": summarize(e.payload), "hash": e.hash}
            for e in history
        ])
        return
    print_table(
        ["seq", "branch", "type", "actor", "time", "summary"],
        [(e.seq, e.branch, e.type, e.actor, e.recorded_at.strftime("%Y-%m-%d %H:%M:%S"), summarize(e.payload))
         for e in history],
    )


def lineage_command(
    experiment: str = typer.Argument(None, help="Only this experiment (all when omitted)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    as_dot: bool = typer.Option(False, "--dot", help="Print a Graphviz digraph."),
) -> None:
    """The branch tree: each branch's fork point, status (incumbent: the best so far; start,
    promoted, rejected, running: not decided yet), head and scores."""
    from evotrainer.client import connect

    with connect() as client:
        tree = client.lineage(experiment)
    if as_json:
        print_json(tree.to_json())
    elif as_dot:
        typer.echo(tree.dot)
    else:
        for line in tree.lines:
            typer.echo(line)


def replay_command(
    ref: str = typer.Argument(..., help="EXPERIMENT/BRANCH to replay."),
    projections: bool = typer.Option(False, "--projections", help="Rebuild every projection and compare instead."),
    allow_unverified: bool = typer.Option(
        False, "--allow-unverified", help="Exit 0 even when results that no task or command produced are in the branch."
    ),
    tolerance: list[str] = typer.Option(
        [], "--tolerance", metavar="METRIC=EPS",
        help="Absolute tolerance for a metric (a payload field path such as avg_at_k, or a pattern such as"
        " 'step_metrics.*'), used only where the recorded machine is not bit-reproducible with this one;"
        " over the defaults its fingerprint recorded. Repeatable.",
    ),
) -> None:
    """Re-execute the branch's recorded train, evaluate, diagnose and backtest tasks and
    compare their outputs hash for hash, and name every result that no task or command
    produced as unverifiable (or, with --projections, rebuild the projections); exit 0
    identical, 1 at the first difference or when a result is unverifiable."""
    if not projections:
        from evotrainer.fleet.tolerance import parse_tolerances

        _replay_computations(BranchRef.parse(ref, allow_seq=False), allow_unverified, parse_tolerances(tolerance))
        return
    from evotrainer.lineage.projections import LIVE_SCHEMA, Projector, compare, rebuild

    branch = BranchRef.parse(ref, allow_seq=False)
    with EventStore.connect() as store:
        store.branch(branch)
        projector = Projector(store)
        projector.catch_up()
        scratch = f"replay_{uuid.uuid4().hex[:10]}"
        try:
            events = rebuild(store, scratch, upto=projector.position())
            difference = compare(store.conn, LIVE_SCHEMA, scratch)
        finally:
            store.conn.execute(f'DROP SCHEMA IF EXISTS "{scratch}" CASCADE')
    if difference is not None:
        typer.echo(f"DIFFERENT: {difference}")
        raise typer.Exit(1)
    typer.echo(f"identical: {events} events rebuilt into every projection, no difference")


def _replay_computations(branch: BranchRef, allow_unverified: bool, tolerances: Tolerances) -> None:
    from evotrainer.fleet.replay import REPLAYABLE, replay_branch
    from evotrainer.training.progress import quiet_libraries

    quiet_libraries()  # the tasks run again here: their libraries' bars and warnings go to the log
    counts: dict[str, int] = {}
    changed_environment = False
    within = 0
    largest: dict[str, float] = {}
    with EventStore.connect() as store:
        store.branch(branch)
        unverified = unverifiable_results(store, branch)
        for replayed in _replayed_or_why_not(replay_branch(store, branch, tolerances)):
            where = f"{replayed.request.experiment}/{replayed.request.branch}@{replayed.request.seq}"
            if replayed.not_reproducible is not None:
                typer.echo(f"{where} {replayed.kind} {replayed.task_id}: compared within tolerances"
                           f" ({replayed.not_reproducible})")
            if replayed.difference is not None:
                typer.echo(f"{where} {replayed.kind} {replayed.task_id}: DIFFERENT: {replayed.difference}")
                _report_deviations(largest | replayed.deviations)
                raise typer.Exit(1)
            counts[replayed.kind] = counts.get(replayed.kind, 0) + 1
            changed_environment |= replayed.environment_changed
            hashes = ", ".join(f"{k.removesuffix('_sha256')} {v[:12]}" for k, v in replayed.outputs.items())
            if replayed.not_reproducible is not None:
                within += 1
                for metric, deviation in replayed.deviations.items():
                    largest[metric] = max(largest.get(metric, 0.0), deviation)
                deviations = ", ".join(f"{m} {d:.4g}" for m, d in sorted(replayed.deviations.items()))
                other = f"; {replayed.hashes_differing} content hashes differ" if replayed.hashes_differing else ""
                typer.echo(f"{where} {replayed.kind} {replayed.task_id}: within tolerances"
                           f" (largest deviation: {deviations or 'none'}{other})")
                continue
            typer.echo(f"{where} {replayed.kind} {replayed.task_id}: identical" + (f" ({hashes})" if hashes else ""))
    for event, why in unverified:
        typer.echo(f"{event.experiment}/{event.branch}@{event.seq} {event.type}: UNVERIFIABLE: {why}")
    if not counts:
        typer.echo(f"nothing to replay: {branch} records no completed {', '.join(REPLAYABLE)} task")
    else:
        tally = ", ".join(f"{kind} {n}" for kind, n in sorted(counts.items()))
        if within:
            _report_deviations(largest)
            typer.echo(f"within tolerances: {sum(counts.values())} tasks re-executed ({tally}), {within} of them"
                       " on a machine not bit-reproducible with the recording, every figure within its tolerance")
        else:
            note = " (in a different environment: see the events' environment)" if changed_environment else ""
            typer.echo(f"identical: {sum(counts.values())} tasks re-executed ({tally}), every output the same{note}")
    if unverified:
        allowed = " (allowed: --allow-unverified)" if allow_unverified else ""
        typer.echo(f"UNVERIFIABLE: {len(unverified)} results in {branch} that no task or command produced{allowed}")
        if not allow_unverified:
            raise typer.Exit(1)


def _report_deviations(largest: dict[str, float]) -> None:
    """The largest deviation per metric compared within a tolerance, one line."""
    if largest:
        typer.echo("largest deviation per metric: " + ", ".join(f"{m} {d:.4g}" for m, d in sorted(largest.items())))


def unverifiable_results(store: EventStore, branch: BranchRef) -> list[tuple[StoredEvent, str]]:
    """The results in the branch's history that no task or command produced (an evaluation,
    diagnosis or backtest; a promotion decision the gate did not record), with why,
    oldest first. Replay cannot vouch for them: nothing it can run gives them."""
    from evotrainer.evolve.promotion import DECISIONS_BRANCH, judged_by_the_gate
    from evotrainer.lineage.provenance import unverifiable

    history = store.read_branch(branch)
    found = [(e, "no task or command produced it") for e in unverifiable(history)]
    held = {e.event_id for e in history}
    main = store.read_branch(BranchRef(branch.experiment, DECISIONS_BRANCH))
    found += [(e, why) for e, why in judged_by_the_gate(store, main) if why is not None and e.event_id in held]
    return sorted(found, key=lambda pair: pair[0].global_position)


def _replayed_or_why_not(replays: Iterator[ReplayedTask]) -> Iterator[ReplayedTask]:
    """The replays; a task that cannot run again here (an artifact this store lacks, a
    local model directory that is gone) ends the command with one line naming it, exit 2."""
    from evotrainer.fleet.replay import CannotReplayError

    try:
        yield from replays
    except CannotReplayError as exc:
        typer.echo(f"evotrainer: error: {exc}", err=True)
        raise typer.Exit(2) from None
