"""`evotrainer compare`: the loop against the fixed recipe, at equal GRPO steps, over seeds.

    evotrainer compare examples/math-tiny.toml --seeds 3
    compare(store, ExperimentConfig.load("examples/math-tiny.toml"), seeds=3, say=print)

For each seed it runs two experiments from the same starting policy:
- the fixed recipe (`NAME-sS-fixed`): the starting harness, never changed, trained in one
  run of `budget_steps` steps, as a practitioner would run it;
- the loop (`NAME-sS`): `evotrainer run` with the same budget, where every candidate's
  steps count, rejected ones included. The file's `iterations` (a cap on candidates) is
  raised where it would stop the loop before its budget: the two arms get the same steps.
Both final policies (the recipe's trained one, the loop's best so far) are evaluated under
the starting harness's protocol on the held-out split's test half, which the gate never
selected on, so the loop's winner is not flattered by having been picked on those
problems. The gain (loop minus fixed) is paired per problem, and its bootstrap interval
resamples seeds, then problems within each seed (bootstrap.py).

The result is one ComparisonRecorded on `NAME-compare/main` (`evotrainer sql` lists them).
Everything is a fleet task with an id derived from its inputs, and the loop resumes from
its log: a killed compare, run again, repeats no work.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evotrainer.artifacts import open_store
from evotrainer.errors import AlreadyExistsError, UsageError
from evotrainer.events import ComparisonRecorded
from evotrainer.evolve.bootstrap import bootstrap_interval
from evotrainer.evolve.controller import run_experiment, selection_protocol
from evotrainer.evolve.experiment_config import ExperimentConfig
from evotrainer.evolve.promotion import DECISIONS_BRANCH, newest_policy, per_problem
from evotrainer.evolve.tasks import run_task
from evotrainer.harness.spec import HarnessSpec
from evotrainer.harness.versions import versioned_event
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, NewEvent, StoredEvent

Say = Callable[[str], None]
SEED_STRIDE = 1000
"""Seed s trains with grpo.seed + 1000 s: the loop's chunks move their seed on by the steps
trained, so seeds this far apart never share a chunk's data order."""


@dataclass(frozen=True)
class Arm:
    """One side of one seed: where it ran and how its final policy scored on the test half."""

    experiment: str
    branch: str
    policy: str
    score: float
    steps: int
    """GRPO steps the side spent (the loop's rejected candidates included)."""
    trained_steps: int
    """GRPO steps its final policy carries: its training runs, back to the start."""
    wall_seconds: float
    results_sha256: str


def compare(
    store: EventStore, config: ExperimentConfig, seeds: int, budget_steps: int | None = None,
    say: Say = lambda line: None,
) -> StoredEvent:
    """Run (or resume) the comparison and record it; returns the ComparisonRecorded."""
    budget = budget_steps or config.budget_steps
    if budget is None:
        raise UsageError(f"{config.name}: give the comparison a budget (budget_steps in the file or --budget-steps)")
    if seeds < 1:
        raise UsageError("compare needs at least 1 seed")
    start = config.starting_harness()
    if start.grpo.max_steps > budget:
        raise UsageError(f"a candidate trains {start.grpo.max_steps} steps, more than the budget of {budget}")
    artifacts = open_store()
    rows: list[dict[str, Any]] = []
    gains: list[list[float]] = []
    for seed in range(seeds):
        seeded = _seeded(config, seed, budget)
        fixed = _fixed_recipe(store, seeded, budget, say)
        loop = _loop(store, seeded, say)
        ours, theirs = per_problem(artifacts.get(loop.results_sha256)), per_problem(artifacts.get(fixed.results_sha256))
        common = sorted(set(ours) & set(theirs))
        gains.append([ours[t] - theirs[t] for t in common])
        say(f"seed {seed}: loop {loop.score:.3f} ({loop.steps} steps, {loop.wall_seconds:.0f} s) against fixed "
            f"recipe {fixed.score:.3f} ({fixed.steps} steps, {fixed.wall_seconds:.0f} s): "
            f"gain {loop.score - fixed.score:+.3f}")  # fmt: skip
        rows.append({"seed": seed, "loop": _arm_json(loop), "fixed": _arm_json(fixed),
                     "gain": loop.score - fixed.score})  # fmt: skip
    gate = start.promotion
    low, high = bootstrap_interval(gains, gate.confidence, gate.bootstrap_samples)
    loop_mean = sum(r["loop"]["score"] for r in rows) / seeds
    fixed_mean = sum(r["fixed"]["score"] for r in rows) / seeds
    recorded = ComparisonRecorded(
        experiment=config.name, config_sha256=_config_hash(config), budget_steps=budget, seeds=rows,
        loop_mean=loop_mean, fixed_mean=fixed_mean, gain=loop_mean - fixed_mean, interval=[low, high],
        confidence=gate.confidence, problems=min((len(g) for g in gains), default=0),
    )  # fmt: skip
    where = BranchRef(f"{config.name}-compare", DECISIONS_BRANCH)
    _create(store, where.experiment, config, "evotrainer compare")
    key = f"comparison:{recorded.config_sha256}:{seeds}:{budget}"
    return store.append(where, [NewEvent.of(recorded, idempotency_key=key)])[0]


def _seeded(config: ExperimentConfig, seed: int, budget: int) -> ExperimentConfig:
    grpo = dict(config.harness.get("grpo", {}))
    grpo["seed"] = int(grpo.get("seed", 0)) + SEED_STRIDE * seed
    return config.model_copy(update={"name": f"{config.name}-s{seed}", "budget_steps": budget,
                                     "iterations": candidates_within(config, budget),
                                     "harness": {**config.harness, "grpo": grpo}})  # fmt: skip


def candidates_within(config: ExperimentConfig, budget: int) -> int:
    """The loop's cap on candidate versions in a comparison: the file's `iterations`, or
    more where that would end the loop with steps left (a file's cap is set for its own
    budget, and `--budget-steps` can give it a larger one). A trained candidate costs the
    starting harness's max_steps; each may bring second looks, which train nothing, so the
    cap leaves room for two of those per trained candidate. The step budget, not the cap,
    is then what ends the loop, as it ends the fixed recipe."""
    trained = math.ceil(budget / config.starting_harness().grpo.max_steps)
    return max(config.iterations, 3 * trained)


def _fixed_recipe(store: EventStore, config: ExperimentConfig, budget: int, say: Say) -> Arm:
    """The starting harness trained in one run of the whole budget, on its own experiment."""
    started = time.monotonic()
    name = f"{config.name}-fixed"
    spec = config.starting_harness().with_field("grpo.max_steps", budget)
    _create(store, name, config, "evotrainer compare: the fixed recipe")
    main = BranchRef(name, DECISIONS_BRANCH)
    if not any(e.type == "HarnessVersioned" for e in store.read_branch(main)):
        store.append(main, [versioned_event(spec)])
    inputs = {"domain": config.domain, "policy": config.policy, "settings": spec.to_grpo_settings().to_dict(),
              "train_tasks": config.train_tasks, "harness_hash": spec.address()}  # fmt: skip
    run_task(store, main, "train", inputs, config.task_timeout_s)
    policy = newest_policy(store.read_branch(main))
    assert policy is not None  # the train task recorded it
    say(f"{name}: trained the fixed recipe for {budget} steps")
    return _scored(store, main, config, policy, budget, started)


def _loop(store: EventStore, config: ExperimentConfig, say: Say) -> Arm:
    started = time.monotonic()
    summary = run_experiment(store, config, say=say)
    if summary.best_policy is None:
        raise UsageError(f"{config.name}: the loop has no policy to report")
    return _scored(store, summary.best, config, summary.best_policy, summary.steps_spent, started)


def _scored(
    store: EventStore, branch: BranchRef, config: ExperimentConfig, policy: str, steps: int, started: float
) -> Arm:
    """Evaluate `policy` on the test half under the starting harness's protocol (the same
    problems and samples for both arms, whatever the loop's harness became)."""
    protocol = selection_protocol(config.domain, config.starting_harness(), part="test")
    produced = run_task(store, branch, "evaluate", {**protocol, "policy": policy}, config.task_timeout_s)
    score = next(e.payload for e in produced if e.type == "EvaluationRecorded")
    return Arm(branch.experiment, branch.branch, policy, float(score["avg_at_k"]), steps,
               trained_steps(store.read_branch(branch), policy), time.monotonic() - started,
               score["results_sha256"])  # fmt: skip


def trained_steps(history: list[StoredEvent], policy: str) -> int:
    """The GRPO steps `policy` carries: each training run that produced it, followed back
    through the policy that run started from, as far as the history records."""
    runs = {e.payload["policy_sha256"]: (e.payload["base_policy_sha256"], int(e.payload["steps"]))
            for e in history if e.type == "TrainingCompleted"}  # fmt: skip
    steps, seen = 0, set()
    while policy in runs and policy not in seen:
        seen.add(policy)
        policy, run_steps = runs[policy]
        steps += run_steps
    return steps


def _arm_json(arm: Arm) -> dict[str, Any]:
    return {"experiment": arm.experiment, "branch": arm.branch, "policy": arm.policy, "score": arm.score,
            "steps": arm.steps, "trained_steps": arm.trained_steps, "wall_seconds": arm.wall_seconds,
            "results_sha256": arm.results_sha256}  # fmt: skip


def _create(store: EventStore, name: str, config: ExperimentConfig, description: str) -> None:
    try:
        store.create_experiment(name, {"domain": config.domain.split(":", 1)[0], "description": description,
                                       "config": config.model_dump(mode="json")})  # fmt: skip
    except AlreadyExistsError:
        pass  # resuming


def _config_hash(config: ExperimentConfig) -> str:
    spec: HarnessSpec = config.starting_harness()
    text = config.model_dump_json() + spec.address()
    return hashlib.sha256(text.encode()).hexdigest()
