"""The evolve controller: DESIGN.md's loop as a process manager over the log.

    evotrainer run examples/digits.toml
    run_experiment(store, ExperimentConfig.load("examples/digits.toml"), say=print)

Each round it makes sure the best so far has a training run, an evaluation of its newest
policy and a diagnosis of that run (requesting the tasks it lacks); asks the built-in
proposer for single-field changes that answer the diagnosed conditions, ranked by the
skill library; backtests each one a backtest can judge, dropping those that fail; forks a
branch for the first survivor; trains, evaluates and diagnoses it; and lets the
promotion gate decide (which also records the skill). It stops after `iterations`
candidate branches, or when nothing is left to propose.

It holds no state of its own. Each step looks in the log for its result before doing
anything; task ids and idempotency keys are derived from what they act on; a candidate
that a killed controller left half-done is finished before anything new starts, and
counts against the budget. Killing it at any point loses nothing and repeats nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evotrainer.backtest.replay import NotBacktestableError, backtest_kind
from evotrainer.domains import get_domain
from evotrainer.errors import AlreadyExistsError, UsageError
from evotrainer.events import InterventionProposed
from evotrainer.evolve.execute import backtest_failures, check_backtest, fork_for_intervention
from evotrainer.evolve.experiment_config import ExperimentConfig
from evotrainer.evolve.promotion import (
    DECISIONS_BRANCH,
    evaluation_protocol,
    incumbent_of,
    intervention_of,
    newest_policy,
    own_events,
    record_promotion,
    reject_unrunnable,
)
from evotrainer.evolve.proposer import Proposal, builtin_proposals, current_value
from evotrainer.evolve.skills import direction, skill_library
from evotrainer.evolve.tasks import TaskFailedError, run_task
from evotrainer.harness.intervention import design_intervention
from evotrainer.harness.spec import HarnessSpec
from evotrainer.harness.versions import harness_of, versioned_event
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, NewEvent, StoredEvent

Say = Callable[[str], None]
EVALUATION_COMPLETION_TOKENS = 16
"""Completion budget of evaluations: fixed, so a change to training's length budget does not
change the protocol scores are compared under."""
_BACKTEST_HEADLINES = ("dead_groups_rescued", "ordering_violations_introduced", "correct_cut_fraction",
                       "effective_data_fraction")  # fmt: skip


@dataclass(frozen=True)
class RunSummary:
    best: BranchRef
    best_score: float | None
    candidates: int
    promoted: int


def run_experiment(store: EventStore, config: ExperimentConfig, say: Say = lambda line: None) -> RunSummary:
    """Run (or resume) the loop for `config` until its budget or its ideas run out."""
    run = _Run(store, config, say)
    main = run.start()
    while True:
        candidates = run.candidates()
        for candidate in run.unjudged(candidates):
            run.judge(candidate)
        tried = len(candidates)
        if tried >= config.iterations:
            say(f"budget spent: {tried} of {config.iterations} candidate versions tried")
            break
        incumbent = incumbent_of(store, config.name)
        run.complete(incumbent)
        fresh = run.next_candidate(incumbent)
        if fresh is None:
            say(f"nothing left to propose for {incumbent}: stopping after {tried} candidate versions")
            break
        run.judge(fresh)
    return run.summary(main, tried)


class _Run:
    def __init__(self, store: EventStore, config: ExperimentConfig, say: Say) -> None:
        self.store, self.config, self.say = store, config, say
        self.domain = get_domain(config.domain)  # an unknown domain is refused before anything is written

    def start(self) -> BranchRef:
        """The experiment and its starting harness on main (recorded once)."""
        config, spec = self.config, self.config.starting_harness()
        main = BranchRef(config.name, DECISIONS_BRANCH)
        try:
            self.store.create_experiment(config.name, {"domain": config.domain.split(":", 1)[0],
                                                       "description": "evotrainer run",
                                                       "config": config.model_dump(mode="json")})  # fmt: skip
            self.say(f"experiment {config.name} created")
        except AlreadyExistsError:
            self.say(f"experiment {config.name} exists: resuming from its log")
        recorded = [e for e in self.store.read_branch(main) if e.type == "HarnessVersioned"]
        if not recorded:
            self.store.append(main, [versioned_event(spec)])
        elif recorded[0].payload["harness_hash"] != spec.address():
            started = recorded[0].payload["harness_hash"][:12]
            raise UsageError(f"experiment {config.name} started under harness {started}, not this file's "
                             f"{spec.address()[:12]}: give the changed experiment a new name")  # fmt: skip
        return main

    # -- the log's view ------------------------------------------------------------

    def candidates(self) -> list[BranchRef]:
        """Branches that run an intervention (fork_for_intervention's), oldest first."""
        return [info.ref for info in self.store.branches(self.config.name) if info.name != DECISIONS_BRANCH
                and intervention_of(self.store.read_branch(info.ref), info.ref) is not None]  # fmt: skip

    def unjudged(self, candidates: list[BranchRef]) -> list[BranchRef]:
        judged = {e.payload["candidate"] for e in self.store.read_branch(BranchRef(self.config.name, DECISIONS_BRANCH))
                  if e.type == "PromotionDecided"}  # fmt: skip
        return [c for c in candidates if str(c) not in judged]

    # -- steps ---------------------------------------------------------------------

    def complete(self, branch: BranchRef) -> None:
        """Train (if the branch has no run of its own), evaluate its newest policy and
        diagnose its run, each only if the log does not have it yet."""
        history = self.store.read_branch(branch)
        harness = harness_of(history)
        own = own_events(history, branch)
        if not any(e.type == "RolloutsRecorded" for e in own):
            policy = newest_policy(history) or self.config.policy
            settings = harness.spec.to_grpo_settings().to_dict()
            inputs = {"domain": self.config.domain, "policy": policy, "settings": settings,
                      "harness_hash": harness.address}  # fmt: skip
            produced = self._task(branch, "train", inputs)
            summary = next(e.payload["summary"] for e in produced if e.type == "RolloutsRecorded")
            self.say(f"{branch}: trained, dead groups {summary.get('dead_group_ratio', 0):.0%}, "
                     f"mean reward {summary.get('mean_reward', 0):.3f}")  # fmt: skip
            history = self.store.read_branch(branch)
            own = own_events(history, branch)
        newest = newest_policy(history)
        protocol = self._protocol(harness.spec)
        if not any(e.type == "EvaluationRecorded" and e.payload["policy_sha256"] == newest
                   and evaluation_protocol(e) == protocol for e in history):  # fmt: skip
            produced = self._task(branch, "evaluate", {**protocol, "policy": newest})
            score = next(e.payload for e in produced if e.type == "EvaluationRecorded")
            self.say(f"{branch}: {score['metric']} = {score['avg_at_k']:.3f} on {score['problems']} problems")
        evidence = next(e.payload["evidence_sha256"] for e in reversed(own) if e.type == "RolloutsRecorded")
        if not any(e.type == "DiagnosisRecorded" and e.payload["evidence"] == evidence for e in own):
            produced = self._task(branch, "diagnose", {"evidence": evidence})
            diagnosis = next(e.payload for e in produced if e.type == "DiagnosisRecorded")
            self.say(f"{branch}: diagnosed: conditions {', '.join(diagnosis.get('conditions', [])) or 'none'}"
                     f"{', blocking' if diagnosis.get('blocking') else ''}")  # fmt: skip

    def next_candidate(self, incumbent: BranchRef) -> BranchRef | None:
        """Propose, backtest and fork the first change worth training; None when every
        proposal was tried or dropped."""
        history = self.store.read_branch(incumbent)
        harness = harness_of(history)
        own = own_events(history, incumbent)
        diagnosis = next(e for e in reversed(own) if e.type == "DiagnosisRecorded")
        proposals = builtin_proposals(
            harness.spec, diagnosis.payload.get("conditions", []), self.config.domain,
            self.domain.reward_components, skill_library(self.store), self._rejected_in_a_row(),
        )  # fmt: skip
        existing = {info.name for info in self.store.branches(self.config.name)}
        for proposal in proposals:
            designed = design_intervention(harness.spec, {proposal.field: proposal.value},
                                           hypothesis=proposal.hypothesis, proposer="builtin")  # fmt: skip
            ident = designed.event.intervention_id
            name = _branch_name(proposal, current_value(harness.spec, proposal.field), ident)
            if name in existing or _dropped(history, ident):
                continue  # tried already
            self.store.append(incumbent, [*harness.unrecorded_default(),
                                          NewEvent.of(designed.event, idempotency_key=f"intervention:{ident}")])
            change = f"{proposal.field}: {designed.event.old_value!r} -> {designed.event.new_value!r}"
            self.say(f"{incumbent}: proposed {ident} ({change}, for {proposal.trigger})")
            if not self._survives_backtest(incumbent, designed.event):
                continue
            forked = fork_for_intervention(self.store, incumbent, name, ident)
            self.say(f"{incumbent}: forked {self.config.name}/{name} at seq {forked.forked.payload['fork_seq']}")
            return BranchRef(self.config.name, name)
        return None

    def judge(self, candidate: BranchRef) -> None:
        try:
            self.complete(candidate)
        except (TaskFailedError, UsageError) as exc:
            # The change broke its own run (or cannot make one): negative evidence, and the
            # loop goes on.
            stored = reject_unrunnable(self.store, candidate, str(exc))
        else:
            stored = record_promotion(self.store, candidate)[1]
        self.say(f"{candidate}: {stored.payload['reason']}")

    def summary(self, main: BranchRef, candidates: int) -> RunSummary:
        best = incumbent_of(self.store, self.config.name)
        history = self.store.read_branch(best)
        policy = newest_policy(history)
        scores = [e.payload["avg_at_k"] for e in history
                  if e.type == "EvaluationRecorded" and e.payload["policy_sha256"] == policy]  # fmt: skip
        decisions = [e for e in self.store.read_branch(main) if e.type == "PromotionDecided"]
        promoted = sum(e.payload["decision"] == "promoted" for e in decisions)
        return RunSummary(best, scores[-1] if scores else None, candidates, promoted)

    # -- helpers -------------------------------------------------------------------

    def _protocol(self, spec: HarnessSpec) -> dict[str, Any]:
        """The evaluation protocol of a harness, in the fields the gate compares: an
        evaluation someone ran by hand with other settings is not this one."""
        ev = spec.evaluation
        return {"domain": self.config.domain, "k": ev.k, "eval_tasks": ev.eval_tasks, "temperature": ev.temperature,
                "max_completion_length": EVALUATION_COMPLETION_TOKENS, "seed": ev.seed, "data_seed": 0}  # fmt: skip

    def _task(self, branch: BranchRef, kind: str, inputs: dict[str, object]) -> list[StoredEvent]:
        return run_task(self.store, branch, kind, inputs, self.config.task_timeout_s)

    def _survives_backtest(self, incumbent: BranchRef, proposal: InterventionProposed) -> bool:
        ident = proposal.intervention_id
        try:
            backtest_kind(proposal.field)
        except NotBacktestableError:
            return True  # nothing can judge it before training: the gate will
        produced = self._task(incumbent, "backtest", {"intervention_id": ident, "domain": self.config.domain})
        try:
            check_backtest(self.store.read_branch(incumbent), incumbent, proposal)
        except UsageError as exc:
            self.say(f"{incumbent}: dropped {ident}: {exc}")
            return False
        figures = next(e.payload.get("figures", {}) for e in produced if e.type == "BacktestCompleted")
        shown = {k: v for k, v in figures.items() if k in _BACKTEST_HEADLINES}
        listed = ", ".join(f"{k} {v}" for k, v in shown.items())
        self.say(f"{incumbent}: backtest of {ident} did not refute it ({listed})")
        return True

    def _rejected_in_a_row(self) -> int:
        decisions = [e for e in self.store.read_branch(BranchRef(self.config.name, DECISIONS_BRANCH))
                     if e.type == "PromotionDecided"]  # fmt: skip
        count = 0
        for event in reversed(decisions):
            if event.payload["decision"] != "rejected":
                break
            count += 1
        return count


def _dropped(history: list[StoredEvent], ident: str) -> bool:
    """Whether the intervention was proposed here before and its backtest refuted it."""
    proposals = [e for e in history if e.type == "InterventionProposed" and e.payload["intervention_id"] == ident]
    backtests = [e for e in history if e.type == "BacktestCompleted" and e.payload["intervention_id"] == ident]
    return bool(proposals and backtests
                and backtest_failures(backtests[-1], proposals[-1].payload["success_criterion"]))  # fmt: skip


def _branch_name(proposal: Proposal, old: object, ident: str) -> str:
    """e.g. `temperature-raise-3fa2b1`: readable, and unique per intervention."""
    leaf = proposal.field.rsplit(".", 1)[-1].replace("_", "-")
    return f"{leaf}-{direction(old, proposal.value)}-{ident.removeprefix('iv-')[:6]}"

