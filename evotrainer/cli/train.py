"""`evotrainer train` and `evotrainer evaluate`: GRPO and Avg@k on a branch, recorded as events."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import typer

from evotrainer.cli.render import print_json, print_table
from evotrainer.errors import EvotrainerError, UsageError
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, StoredEvent


def latest_policy(store: EventStore, ref: BranchRef) -> str | None:
    """The newest policy checkpoint recorded in the branch's history, if any."""
    from evotrainer.evolve.promotion import newest_policy

    return newest_policy(store.read_branch(ref))


def experiment_domain(store: EventStore, ref: BranchRef) -> str:
    """The domain the branch's experiment was created for: the full spec in its config
    (`evotrainer run` records e.g. math:digit_add there), else its domain (math, code, swe);
    UsageError when it names neither."""
    created = store.read_branch(BranchRef(ref.experiment, "main"), upto_seq=1)[0].payload
    config = created.get("config")
    spec = config.get("domain") if isinstance(config, dict) else None
    if isinstance(spec, str) and spec:
        return spec
    if created.get("domain"):
        return str(created["domain"])
    raise UsageError(f"experiment {ref.experiment} names no domain: pass --domain (see `evotrainer domains list`)")


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
    from evotrainer.harness.versions import branch_harness
    from evotrainer.training.task import training_request

    given = {"max_steps": steps, "seed": seed, "learning_rate": learning_rate,
             "num_generations": group_size, "prompts_per_step": prompts_per_step}  # fmt: skip
    overrides = {k: v for k, v in given.items() if v is not None}

    def inputs(store: EventStore, branch: BranchRef, domain: str) -> dict[str, object]:
        start = latest_policy(store, branch) if policy == "latest" else policy
        harness = branch_harness(store, branch)
        settings = harness.spec.to_grpo_settings(**overrides).to_dict()
        request = training_request({"domain": domain, "policy": start or "tiny", "settings": settings})
        # The run is recorded as under the harness only when nothing overrode it.
        exact = harness.recorded_seq is not None and not overrides
        return {**request.to_dict(), "harness_hash": harness.address if exact else None}

    _run_task(ref, "train", inputs, domain, as_json)


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
    from evotrainer.harness.versions import branch_harness
    from evotrainer.training.task import evaluation_request

    def inputs(store: EventStore, branch: BranchRef, domain: str) -> dict[str, object]:
        spec = latest_policy(store, branch) if policy == "latest" else policy
        protocol = branch_harness(store, branch).spec.evaluation
        given = {"k": k, "eval_tasks": tasks, "temperature": temperature, "seed": seed}
        defaults = {"k": protocol.k, "eval_tasks": protocol.eval_tasks, "temperature": protocol.temperature,
                    "seed": protocol.seed}  # fmt: skip
        settings = {name: defaults[name] if value is None else value for name, value in given.items()}
        request = evaluation_request({"domain": domain, "policy": spec or "tiny", **settings})
        return request.to_dict()

    _run_task(ref, "evaluate", inputs, domain, as_json)


def _run_task(
    ref: str, kind: str, build_inputs: Callable[[EventStore, BranchRef, str], dict[str, object]],
    domain: str | None, as_json: bool,
) -> None:
    """Validate, request, and (with no broker) execute in this process; report its events."""
    from evotrainer import config
    from evotrainer.domains import get_domain, with_file_relative_to
    from evotrainer.fleet import request_task, run_in_process
    from evotrainer.training.progress import quiet_libraries, show_progress_lines

    branch = BranchRef.parse(ref, allow_seq=False)
    with EventStore.connect() as store:
        store.branch(branch)
        # A relative file (math:file=data.jsonl) is recorded absolute: a worker may start elsewhere.
        domain = with_file_relative_to(domain or experiment_domain(store, branch), Path.cwd())
        get_domain(domain)  # refuse an unknown domain or a bad file before anything is recorded
        task_id = f"{kind}-{uuid.uuid4().hex[:12]}"
        requested = request_task(store, branch, kind, task_id, build_inputs(store, branch, domain))
        if config.broker_url():
            typer.echo(f"requested {kind} task {task_id} on {branch} (seq {requested.seq}); "
                       "a worker will run it: see `evotrainer tasks`")
            return
        quiet_libraries()
        show_progress_lines()
        run_in_process(store)
        produced = [e for e in store.read_branch(branch, after_seq=requested.seq - 1)
                    if (e.idempotency_key or "").startswith(f"{task_id}:")
                    or e.payload.get("task_id") == task_id]
    failure = next((e for e in produced if e.type == "TaskFailed"), None)
    _report(produced, as_json)
    if failure is not None:
        raise TaskFailedError(f"{kind} task {task_id} failed: {failure.payload['message']}")


class TaskFailedError(EvotrainerError):
    """The requested task ended in TaskFailed."""


def _report(stored: list[StoredEvent], as_json: bool) -> None:
    if as_json:
        print_json([e.to_json() for e in stored])
    else:
        print_table(["seq", "event", "what"], _summary(stored))
