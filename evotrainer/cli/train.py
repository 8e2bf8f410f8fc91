"""`evotrainer train` and `evotrainer evaluate`: GRPO and Avg@k on a branch, recorded as events."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from evotrainer.cli.render import print_json, print_table
from evotrainer.errors import EvotrainerError
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, StoredEvent

if TYPE_CHECKING:
    from evotrainer.client.work import Inputs


def _describe(event: StoredEvent) -> str:
    p = event.payload
    if event.type == "PolicyCheckpointed":
        return f"{p['kind']} {p['policy_sha256'][:12]} ({p['parameters']:,} parameters)"
    if event.type == "RolloutsRecorded":
        summary = p["summary"]
        return (
            f"evidence {p['evidence_sha256'][:12]} dead groups {summary.get('dead_group_ratio', 0):.0%}"
            f" mean reward {summary.get('mean_reward', 0):.3f}"
        )
    if event.type == "TrainingCompleted":
        return f"{p['steps']} steps in {p['wall_seconds']:.1f}s"
    if event.type == "EvaluationRecorded":
        return f"{p['metric']} = {p['avg_at_k']:.3f} on {p['problems']} problems"
    if event.type == "TaskRequested":
        return f"{p['kind']} task {p['task_id']} on queue {p['queue']}"
    if event.type == "TaskCompleted":
        return f"{p['task_id']} by {p['worker']} (attempt {p['attempt']}, {p['duration_s']:.1f}s)"
    if event.type == "TaskFailed":
        return f"{p['task_id']}: {p['error_class']}: {p['message']}"
    return ""


def _summary(events: list[StoredEvent]) -> list[tuple[object, ...]]:
    return [(e.seq, e.type, _describe(e)) for e in events]


def train_command(
    ref: str = typer.Argument(..., help="EXPERIMENT/BRANCH to train on."),
    domain: str = typer.Option(
        None, help="Task domain (see `evotrainer domains list`; default: the experiment's own)."
    ),
    policy: str = typer.Option(
        "latest", help="'latest' (the branch's newest checkpoint, else tiny), tiny, smollm2, hf:DIR or a sha256."
    ),
    steps: int = typer.Option(None, help="Optimizer steps (default: the branch harness's grpo.max_steps)."),
    seed: int = typer.Option(None, help="Seed of sampling, data order and initialisation (default: grpo.seed)."),
    learning_rate: float = typer.Option(None, help="AdamW learning rate (default: grpo.learning_rate)."),
    group_size: int = typer.Option(None, help="Completions per prompt (default: grpo.num_generations)."),
    prompts_per_step: int = typer.Option(None, help="Prompt groups per step (default: grpo.prompts_per_step)."),
    as_json: bool = typer.Option(False, "--json", help="Print the task's events as JSON."),
) -> None:
    """Request a GRPO run of the branch's policy under the branch's harness (a `train` task)
    and, without a broker, run it here. Options override single settings for this run."""
    from evotrainer.client.work import training_inputs

    given = {"max_steps": steps, "seed": seed, "learning_rate": learning_rate,
             "num_generations": group_size, "prompts_per_step": prompts_per_step}  # fmt: skip
    _run_task(ref, "train", training_inputs(policy, given), domain, as_json)


def evaluate_command(
    ref: str = typer.Argument(..., help="EXPERIMENT/BRANCH whose policy is evaluated."),
    domain: str = typer.Option(None, help="Task domain (default: the experiment's own)."),
    policy: str = typer.Option("latest", help="'latest' or a policy spec as for `train`."),
    k: int = typer.Option(None, help="Samples per problem, Avg@k (default: the branch harness's evaluation.k)."),
    tasks: int = typer.Option(None, help="Held-out problems (default: evaluation.eval_tasks)."),
    temperature: float = typer.Option(None, help="Sampling temperature (default: evaluation.temperature)."),
    seed: int = typer.Option(None, help="Sampling seed (default: evaluation.seed)."),
    as_json: bool = typer.Option(False, "--json", help="Print the task's events as JSON."),
) -> None:
    """Request Avg@k on the held-out split (an `evaluate` task) and, without a broker, run it
    here: under the branch harness's evaluation protocol unless options override it."""
    from evotrainer.client.work import evaluation_inputs

    given = {"k": k, "eval_tasks": tasks, "temperature": temperature, "seed": seed}
    _run_task(ref, "evaluate", evaluation_inputs(policy, given), domain, as_json)


def _run_task(ref: str, kind: str, build_inputs: Inputs, domain: str | None, as_json: bool) -> None:
    """Validate, request, and (with no broker) execute in this process; report its events."""
    from evotrainer.client.work import request_work
    from evotrainer.training.progress import quiet_libraries, show_progress_lines

    branch = BranchRef.parse(ref, allow_seq=False)
    quiet_libraries()
    show_progress_lines()
    with EventStore.connect() as store:
        run = request_work(store, branch, kind, build_inputs, domain)
    if not run.ran_here:
        typer.echo(f"requested {kind} task {run.task_id} on {branch} (seq {run.requested_seq}); "
                   "a worker will run it: see `evotrainer tasks`")
        return
    _report(list(run.events), as_json)
    if run.failure is not None:
        raise TaskFailedError(f"{kind} task {run.task_id} failed: {run.failure}")


class TaskFailedError(EvotrainerError):
    """The requested task ended in TaskFailed."""


def _report(stored: list[StoredEvent], as_json: bool) -> None:
    if as_json:
        print_json([e.to_json() for e in stored])
    else:
        print_table(["seq", "event", "what"], _summary(stored))
