"""`evotrainer run` (the evolve loop) and `evotrainer promote` (its gate, on one branch).

    evotrainer run examples/digits.toml      # train, diagnose, propose, backtest, fork, promote
    evotrainer promote demo/lr-up            # exit 0 promoted, 1 rejected, 2 usage error
    evotrainer promote demo/lr-up --json
    evotrainer compare examples/math-tiny.toml --seeds 3   # the loop against the fixed recipe

The decision is recorded on EXPERIMENT/main as PromotionDecided, with the SkillRecorded of
its intervention's outcome (--no-record: print them only). Missing evidence (no run of its
own, no diagnosis of it, no evaluation of the newest policy, no baseline under the same
protocol) is a usage error that says which command supplies it, and nothing is written.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from evotrainer.cli.render import print_json, print_line
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore


def promote_command(
    ref: str = typer.Argument(..., help="EXPERIMENT/BRANCH: the candidate."),
    as_json: bool = typer.Option(False, "--json", help="Print the PromotionDecided event as JSON."),
    record: bool = typer.Option(True, help="Append PromotionDecided to EXPERIMENT/main (--no-record: print only)."),
) -> None:
    """Promote a branch if it beats the best so far by the gate's margin with no blocking
    diagnostic. Exit 0 promoted, 1 rejected, 2 usage error."""
    from evotrainer.evolve import decide_promotion, record_promotion

    candidate = BranchRef.parse(ref, allow_seq=False)
    with EventStore.connect() as store:
        if record:
            decision, stored = record_promotion(store, candidate)
            payload, where = stored.payload, f"{stored.experiment}/{stored.branch}@{stored.seq}"
        else:
            decision = decide_promotion(store, candidate)
            payload, where = decision.decided.model_dump(mode="json"), None
    promoted = payload["decision"] == "promoted"
    skill = decision.skill.skill_id if decision.skill is not None else None
    if as_json:
        print_json({**payload, "recorded_at": where, "skill": skill})
    else:
        _print_decision(payload, where, skill)
    if not promoted:
        raise typer.Exit(1)


def _print_decision(payload: dict[str, Any], where: str | None, skill: str | None) -> None:
    evidence = payload.get("evidence", {})
    print_line(f"{payload['decision']} {payload['candidate']}")
    print_line(f"  {payload['reason']}")
    paired = evidence.get("per_problem")
    if paired:
        error = "" if paired["standard_error"] is None else f" +- {paired['standard_error']:.4f}"
        print_line(f"  per problem: {paired['better']} better, {paired['worse']} worse, {paired['same']} the same "
             f"(mean gain {paired['mean_gain']:+.4f}{error})")  # fmt: skip
    else:
        print_line("  per problem: the results artifacts are not in this artifact store")
    blocking = payload.get("blocking_findings", [])
    print_line("  blocking: " + ("; ".join(blocking) if blocking else "none"))
    criterion = evidence.get("criterion")
    if criterion:
        print_line(f"  intervention {payload['intervention_id']}: {criterion['text']}: {criterion['outcome']}")
    if skill:
        print_line(f"  skill {skill}: one {'success' if payload['decision'] == 'promoted' else 'failure'} more")
    if where:
        print_line(f"recorded PromotionDecided at {where}" + (" with SkillRecorded" if skill else ""))


def run_command(
    config: str = typer.Argument(..., help="The experiment, a TOML file (see examples/digits.toml)."),
    iterations: int | None = typer.Option(None, min=1, help="Candidate versions to try, at most (default: file's)."),
) -> None:
    """Run the evolve loop on an experiment, or resume it from its log: train, diagnose,
    propose, backtest, fork, evaluate and promote until the budget or the ideas run out.
    Exit 4 when a human gate waits (`evotrainer pending`)."""
    from evotrainer import config as settings
    from evotrainer.evolve.controller import run_experiment
    from evotrainer.evolve.experiment_config import ExperimentConfig
    from evotrainer.training.progress import quiet_libraries, show_progress_lines

    loaded = ExperimentConfig.load(config)
    if iterations is not None:
        loaded = loaded.model_copy(update={"iterations": iterations})
    if not settings.broker_url():  # the tasks run in this process: their output is ours to keep tidy
        quiet_libraries()
        show_progress_lines()
    from evotrainer.evolve.gates import DecisionPending

    try:
        summary = resuming_after_lost_connections(lambda store: run_experiment(store, loaded, say=print_line))
    except DecisionPending as waiting:
        # Not a failure: the experiment's autonomy asks a person here (exit 4 tells scripts so).
        print_line(f"stopped: {waiting}")
        raise typer.Exit(4) from None
    score = "not evaluated" if summary.best_score is None else f"Avg@k {summary.best_score:.3f}"
    print_line(f"best so far: {summary.best} ({score}); {summary.candidates} candidate versions, "
               f"{summary.promoted} promoted")


RECONNECT_DELAYS_S = (1, 2, 4, 8, 15, 30, 60)
"""Waits before each reconnect of `run` after the database connection was lost (two
minutes in all): long enough for a restarted server or a failover."""

T = TypeVar("T")


def resuming_after_lost_connections(work: Callable[[EventStore], T]) -> T:
    """Run `work` on a connected store; when the database connection is lost (a server
    restart, pg_terminate_backend, the network), connect again with backoff and run it
    again: the loop holds no state of its own and resumes from its log, repeating nothing.
    Past the last try it is one line and exit 1, never a traceback."""
    import psycopg

    from evotrainer.errors import DatabaseUnavailableError

    lost = (psycopg.OperationalError, psycopg.InterfaceError, DatabaseUnavailableError)
    for delay in (*RECONNECT_DELAYS_S, None):
        try:
            with EventStore.connect() as store:
                return work(store)
        except lost as exc:
            why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            if delay is None:
                raise DatabaseUnavailableError(f"lost the database connection and could not get it back "
                                               f"({why}); run the command again to resume") from None  # fmt: skip
            print_line(f"lost the database connection ({why}): resuming from the log in {delay} s")
            time.sleep(delay)
    raise AssertionError("unreachable")


def compare_command(
    config: str = typer.Argument(..., help="The experiment, a TOML file (see examples/math-tiny.toml)."),
    seeds: int = typer.Option(3, min=1, help="Seeds to run each side on."),
    budget_steps: int | None = typer.Option(None, min=1, help="GRPO steps per side (default: the file's)."),
    as_json: bool = typer.Option(False, "--json", help="Print the ComparisonRecorded event as JSON."),
) -> None:
    """Run the loop and the fixed recipe (the starting harness, never changed) at equal GRPO
    steps for each seed, score both final policies on the held-out test half, and record
    the gain with its bootstrap interval (resumable: run it again after a kill)."""
    from evotrainer import config as settings
    from evotrainer.evolve.compare import compare
    from evotrainer.evolve.experiment_config import ExperimentConfig
    from evotrainer.training.progress import quiet_libraries, show_progress_lines

    loaded = ExperimentConfig.load(config)
    if not settings.broker_url():
        quiet_libraries()
        if not as_json:
            show_progress_lines()
    say = (lambda line: None) if as_json else print_line
    stored = resuming_after_lost_connections(lambda store: compare(store, loaded, seeds, budget_steps, say=say))
    if as_json:
        print_json({**stored.payload, "recorded_at": f"{stored.experiment}/{stored.branch}@{stored.seq}"})
        return
    p = stored.payload
    # loop steps: what the loop spent; in policy: what its final policy carries (a comparison
    # recorded before that was kept shows "-").
    print_line("seed   fixed    loop     gain  loop steps  in policy  fixed s  loop s")
    for row in p["seeds"]:
        fixed, loop = row["fixed"], row["loop"]
        print_line(f"{row['seed']:>4}  {fixed['score']:6.3f}  {loop['score']:6.3f}  {row['gain']:+7.3f}  "
                   f"{loop['steps']:>10}  {loop.get('trained_steps', '-'):>9}  {fixed['wall_seconds']:7.0f}  "
                   f"{loop['wall_seconds']:6.0f}")
    low, high = p["interval"]
    print_line(f"mean  {p['fixed_mean']:6.3f}  {p['loop_mean']:6.3f}  {p['gain']:+7.3f}  "
               f"({p['confidence']:.0%} interval [{low:+.3f}, {high:+.3f}], seeds and {p['problems']} test problems)")
    verdict = "ahead beyond noise" if low > 0 else "behind beyond noise" if high < 0 else "not distinguishable"
    print_line(f"loop against fixed recipe at {p['budget_steps']} GRPO steps: {verdict}; "
               f"recorded at {stored.experiment}/{stored.branch}@{stored.seq}")


def status_command(
    experiment: str = typer.Argument(..., help="The experiment's name."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """The experiment's GRPO step budget (spent, left), each branch's steps, verdict and
    selection score, the best so far, the tasks running now and the human decisions the
    loop waits for."""
    import dataclasses

    from evotrainer.cli.render import print_table
    from evotrainer.evolve.status import experiment_status
    from evotrainer.refs import check_name

    with EventStore.connect() as store:
        status = experiment_status(store, check_name("experiment", experiment))
    if as_json:
        print_json({**dataclasses.asdict(status), "left": status.left})
        return
    budget = "no step budget" if status.budget_steps is None else f"of {status.budget_steps}, {status.left} left"
    print_line(f"{status.experiment}: {status.spent} GRPO steps spent ({budget}); best so far {status.incumbent}")
    print_table(["branch", "steps", "tokens", "cpu s", "gpu s", "verdict", "score"],
                [(b.branch, b.steps, b.tokens, f"{b.cpu_seconds:.0f}", f"{b.gpu_seconds:.0f}", b.verdict,
                  "-" if b.score is None else f"{b.score:.3f}") for b in status.branches])  # fmt: skip
    for task in status.running:
        print_line(f"running: {task}")
    for request in status.waiting:
        print_line(f"waiting for a human decision: {request}")
