"""`evotrainer train` and `evotrainer evaluate`: GRPO and Avg@k on a branch, recorded as events."""

from __future__ import annotations

import uuid

import typer

from evotrainer.cli.render import print_json, print_table
from evotrainer.cli.session import open_store
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, StoredEvent


def latest_policy(store: EventStore, ref: BranchRef) -> str | None:
    """The newest policy checkpoint recorded in the branch's history, if any."""
    for event in reversed(store.read_branch(ref)):
        if event.type == "PolicyCheckpointed":
            return str(event.payload["policy_sha256"])
    return None


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
    return ""


def _summary(events: list[StoredEvent]) -> list[tuple[object, ...]]:
    return [(e.seq, e.type, _describe(e)) for e in events]


def train_command(
    ref: str = typer.Argument(..., help="EXPERIMENT/BRANCH to train on."),
    domain: str = typer.Option("math:digit_add", help="Task domain (see `evotrainer domains list`)."),
    policy: str = typer.Option(
        "latest", help="'latest' (the branch's newest checkpoint, else tiny), tiny, smollm2, hf:DIR or a sha256."
    ),
    steps: int = typer.Option(20, help="Optimizer steps."),
    seed: int = typer.Option(0, help="Seed of sampling, data order and initialisation."),
    learning_rate: float = typer.Option(1e-3, help="AdamW learning rate."),
    group_size: int = typer.Option(8, help="Completions per prompt."),
    prompts_per_step: int = typer.Option(4, help="Prompt groups per step."),
    as_json: bool = typer.Option(False, "--json", help="Print the appended events as JSON."),
) -> None:
    """Train the branch's policy with GRPO and append its checkpoint, evidence and metrics."""
    from evotrainer.training.task import run_training_task

    branch = BranchRef.parse(ref, allow_seq=False)
    with open_store() as store:
        store.branch(branch)  # fail on an unknown branch before spending compute
        start = latest_policy(store, branch) if policy == "latest" else policy
        inputs = {
            "domain": domain,
            "policy": start or "tiny",
            "settings": {
                "max_steps": steps, "seed": seed, "learning_rate": learning_rate,
                "num_generations": group_size, "prompts_per_step": prompts_per_step,
            },
        }
        events = run_training_task(inputs, key=f"train-{uuid.uuid4().hex[:12]}")
        stored = store.append(branch, events)
    _report(stored, as_json)


def evaluate_command(
    ref: str = typer.Argument(..., help="EXPERIMENT/BRANCH whose policy is evaluated."),
    domain: str = typer.Option("math:digit_add", help="Task domain."),
    policy: str = typer.Option("latest", help="'latest' or a policy spec as for `train`."),
    k: int = typer.Option(8, help="Samples per problem (Avg@k)."),
    tasks: int = typer.Option(32, help="Held-out problems."),
    seed: int = typer.Option(0, help="Sampling seed."),
    as_json: bool = typer.Option(False, "--json", help="Print the appended event as JSON."),
) -> None:
    """Evaluate Avg@k on the held-out split and append EvaluationRecorded."""
    from evotrainer.training.task import run_evaluation_task

    branch = BranchRef.parse(ref, allow_seq=False)
    with open_store() as store:
        store.branch(branch)
        spec = latest_policy(store, branch) if policy == "latest" else policy
        inputs = {"domain": domain, "policy": spec or "tiny", "k": k, "eval_tasks": tasks, "seed": seed}
        stored = store.append(branch, run_evaluation_task(inputs, key=f"evaluate-{uuid.uuid4().hex[:12]}"))
    _report(stored, as_json)


def _report(stored: list[StoredEvent], as_json: bool) -> None:
    if as_json:
        print_json([e.to_json() for e in stored])
    else:
        print_table(["seq", "event", "what"], _summary(stored))
