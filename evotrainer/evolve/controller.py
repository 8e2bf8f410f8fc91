"""The evolve controller: DESIGN.md's loop as a process manager over the log.

    evotrainer run examples/math-tiny.toml
    run_experiment(store, ExperimentConfig.load("examples/math-tiny.toml"), say=print)

It starts by evaluating the untrained starting policy on main: doing nothing is the first
incumbent, which every candidate must beat. Each round it makes sure the best so far has an
evaluation of its newest policy and a diagnosis of its run (requesting the tasks it lacks);
then picks the next candidate, a fork of the best so far that trains its newest policy
further: under the same harness (a continuation) or under one single-field change the
proposer ranked first (backtested first where a backtest can judge it, and dropped if
refuted). The candidate is trained, evaluated on the selection half of the held-out split
and diagnosed, and the promotion gate decides (recording the skill). So the promoted chain
accumulates training as a fixed recipe does, and a chunk of training that does not help
beyond noise is not kept. It stops after `iterations` candidates, when the next one would
overrun `budget_steps` (every candidate's steps count, rejected ones included), or when
nothing is left to propose.

Who proposes the changes is the experiment's `[proposer]` (proposing.py: the rule engine, an
LLM, a person or an agent, each reply recorded before it is acted on), and where a person
decides is its autonomy (gates.py: the loop stops with DecisionPending, exit 4 on the
command line, and resumes from the recorded answer).

It holds no state of its own. Each step looks in the log for its result before doing
anything; task ids and idempotency keys are derived from what they act on; a candidate
that a killed controller left half-done is finished before anything new starts, and
counts against the budget. Killing it at any point loses nothing and repeats nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evotrainer.artifacts import open_store
from evotrainer.artifacts.store import is_artifact_id
from evotrainer.backtest.replay import NotBacktestableError, backtest_kind
from evotrainer.domains import get_domain
from evotrainer.errors import AlreadyExistsError, UsageError
from evotrainer.events import InterventionProposed
from evotrainer.evolve.execute import (
    backtest_failures,
    check_backtest,
    fork_for_intervention,
    fork_to_continue,
    is_continuation,
    is_second_look,
)
from evotrainer.evolve.experiment_config import ExperimentConfig
from evotrainer.evolve.gates import intervention_answer, needs_approval, promotion_answer, vetoed
from evotrainer.evolve.promotion import (
    DECISIONS_BRANCH,
    decide_promotion,
    evaluation_protocol,
    gate_decisions,
    incumbent_of,
    intervention_of,
    newest_policy,
    own_events,
    record_promotion,
    reject_unrunnable,
)
from evotrainer.evolve.proposer import (
    MAX_EVALUATION_PROBLEMS,
    MAX_EVALUATION_SAMPLES,
    VALIDITY_CONDITIONS,
    Proposal,
    builtin_proposals,
    continuation_gain,
    current_value,
    expected_gain,
    reward_trend,
    stalled,
)
from evotrainer.evolve.proposing import RoundContext, answered_proposal, round_proposals
from evotrainer.evolve.skill_proposals import skill_candidates
from evotrainer.evolve.skills import direction, skill_library
from evotrainer.evolve.tasks import TaskFailedError, run_task
from evotrainer.harness.intervention import design_intervention
from evotrainer.harness.spec import HarnessSpec
from evotrainer.harness.versions import harness_of, versioned_event
from evotrainer.lineage.provenance import from_work
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, NewEvent, StoredEvent
from evotrainer.store.anchors import anchor_experiment
from evotrainer.training.evaluation import holds_distinct

Say = Callable[[str], None]
_EXPLOIT_GAIN = 1.9
"""Where more of the same ranks when it is time to exploit (_exploit_now): above every
change on expected_gain's scale but a validity repair (2.0 and up)."""
_BACKTEST_HEADLINES = ("dead_groups_rescued", "wrong_rewarded_removed", "ordering_violations_introduced",
                       "correct_cut_fraction", "effective_data_fraction")  # fmt: skip


@dataclass(frozen=True)
class RunSummary:
    best: BranchRef
    best_score: float | None
    candidates: int
    promoted: int
    steps_spent: int = 0
    """GRPO steps every candidate trained, rejected ones included."""
    best_policy: str | None = None


def run_experiment(store: EventStore, config: ExperimentConfig, say: Say = lambda line: None) -> RunSummary:
    """Run (or resume) the loop for `config` until its budget or its ideas run out."""
    run = _Run(store, config, say)
    run.start()
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
        fresh = run.next_candidate(incumbent, candidates)
        if fresh is None:
            break
        run.judge(fresh)
    return run.summary(run.candidates())


class _Run:
    def __init__(self, store: EventStore, config: ExperimentConfig, say: Say) -> None:
        self.store, self.config, self.say = store, config, say
        self.domain = get_domain(config.domain)  # an unknown domain is refused before anything is written
        if "llm" in (config.proposer.kind, *config.proposer.fallback):
            config.proposer.api_key()  # so is a key variable the file names and the environment lacks
        if is_artifact_id(config.policy) and not (artifacts := open_store()).exists(config.policy):
            # So is a stored policy this machine's artifact store does not hold.
            raise UsageError(f"policy {config.policy[:12]} is not in the artifact store {artifacts.location}; "
                             "name a stored checkpoint (`evotrainer sql` lists policies), tiny, smollm2 or hf:DIR")

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
        recorded = [e for e in self._history(main) if e.type == "HarnessVersioned"]
        if not recorded:
            self.store.append(main, [versioned_event(spec)])
        elif recorded[0].payload["harness_hash"] != spec.address():
            started = recorded[0].payload["harness_hash"][:12]
            raise UsageError(f"experiment {config.name} started under harness {started}, not this file's "
                             f"{spec.address()[:12]}: give the changed experiment a new name")  # fmt: skip
        if newest_policy(self._history(main)) is None:
            # Doing nothing is the first candidate to beat: the starting policy is scored on
            # main (its evaluation task records the checkpoint) before anything trains. A
            # named policy is always recorded; a stored one (a sha256) is recorded here only,
            # where it is the experiment's starting point rather than a branch's own result.
            starting = {"starting_point": True} if is_artifact_id(self.config.policy) else {}
            self._evaluate(main, self.config.policy, extra=starting)
        return main

    # -- the log's view ------------------------------------------------------------

    def candidates(self) -> list[BranchRef]:
        """Branches that run an intervention (fork_for_intervention's) or continue the best
        so far (fork_to_continue's), oldest first."""
        out = []
        for info in self.store.branches(self.config.name):
            if info.name == DECISIONS_BRANCH:
                continue
            history = self._history(info.ref)
            if is_continuation(history, info.ref) or intervention_of(history, info.ref) is not None:
                out.append(info.ref)
        return out

    def steps_spent(self, candidates: list[BranchRef]) -> int:
        """GRPO steps the candidates trained on their own branches (rejected ones too)."""
        return sum(int(e.payload["steps"]) for c in candidates
                   for e in own_events(self._history(c), c) if e.type == "TrainingCompleted")  # fmt: skip

    def unjudged(self, candidates: list[BranchRef]) -> list[BranchRef]:
        judged = {e.payload["candidate"] for e in self._decisions()}
        return [c for c in candidates if str(c) not in judged]

    # -- steps ---------------------------------------------------------------------

    def complete(self, branch: BranchRef) -> None:
        """Train (if the branch is a candidate with no run of its own), evaluate its newest
        policy and diagnose its run, each only if the log does not have it yet. Main trains
        nothing: it holds the starting policy."""
        history = self._history(branch)
        harness = harness_of(history)
        own = own_events(history, branch)
        trains = branch.branch != DECISIONS_BRANCH and not is_second_look(history, branch)
        if trains and not any(e.type == "RolloutsRecorded" for e in own):
            self._train(branch, history, harness.spec, harness.address)
            history = self._history(branch)
            own = own_events(history, branch)
        newest = newest_policy(history)
        protocol = self._protocol(harness.spec)
        if not any(e.type == "EvaluationRecorded" and e.payload["policy_sha256"] == newest
                   and evaluation_protocol(e) == protocol for e in history):  # fmt: skip
            self._evaluate(branch, newest or self.config.policy, protocol)
        runs = [e for e in own if e.type == "RolloutsRecorded"]
        if not runs:
            return  # main: nothing trained here, nothing to diagnose
        evidence = runs[-1].payload["evidence_sha256"]
        if not any(e.type == "DiagnosisRecorded" and e.payload["evidence"] == evidence for e in own):
            produced = self._task(branch, "diagnose", {"evidence": evidence})
            diagnosis = next(e.payload for e in produced if e.type == "DiagnosisRecorded")
            self.say(f"{branch}: diagnosed: conditions {', '.join(diagnosis.get('conditions', [])) or 'none'}"
                     f"{', blocking' if diagnosis.get('blocking') else ''}")  # fmt: skip

    def next_candidate(self, incumbent: BranchRef, candidates: list[BranchRef]) -> BranchRef | None:
        """Fork the next candidate from the best so far: the first, by expected gain, of a
        continuation (more of the same from its newest policy, once per policy) and the
        proposed changes that survive their backtests; None when the budget or the ideas
        ran out (said why)."""
        history = self._history(incumbent)
        harness = harness_of(history)
        spent = self.steps_spent(candidates)
        existing = {info.name for info in self.store.branches(self.config.name)}
        decisions = self._decisions()  # the gate's verdicts, read (and vouched for) once a round
        inconclusive = _last_verdict_inconclusive(decisions)
        # Judging the chunk the gate could not see again costs no GRPO step: it goes first.
        look = self._second_look(incumbent, existing, decisions) if inconclusive else None
        if look is not None or not self._affordable(spent, harness.spec.grpo.max_steps):
            return look
        # The run that made the best so far: its own, or, for a second look, its source's.
        diagnosis = next((e for e in reversed(history) if e.type == "DiagnosisRecorded"), None)
        run = next((e for e in reversed(history) if e.type == "TrainingCompleted"), None)
        continuation = f"continue-{(newest_policy(history) or 'start')[:10]}"
        # What training under this harness does: the best so far's own run and diagnosis,
        # or, for the untrained start, its rejected continuation's (the same policy and
        # harness). Without them the start would have no condition to answer, and the loop
        # would stop with budget left once the step size was tried both ways.
        tried = self._continuation_events(continuation, existing) if run is None else []
        evidence_run = run or next((e for e in reversed(tried) if e.type == "TrainingCompleted"), None)
        diagnosis = diagnosis or next((e for e in reversed(tried) if e.type == "DiagnosisRecorded"), None)
        metrics = evidence_run.payload.get("step_metrics", []) if evidence_run is not None else []
        trend, stalled_run = reward_trend(metrics), stalled(metrics)  # None and False for no run
        diagnosed = diagnosis.payload.get("conditions", []) if diagnosis else []
        seen_on, validity = self._validity_conditions_against(incumbent, decisions)
        diagnosed += [c for c in validity if c not in diagnosed]
        library = skill_library(self.store)
        proposals = builtin_proposals(
            harness.spec, diagnosed, self.config.domain, self.domain.proposable_components, library,
            _rejected_in_a_row(decisions), trend, inconclusive, stalled_run,
        )  # fmt: skip
        # Skills propose their own change, ahead of the rules' (evolve/skill_proposals.py).
        proposals = [*skill_candidates(self.store, harness.spec, diagnosed, self.config.domain, library), *proposals]
        more_of_the_same = continuation_gain(run is not None, trend)
        if self._exploit_now(incumbent, spent, harness.spec.grpo.max_steps, decisions):
            more_of_the_same = max(more_of_the_same, _EXPLOIT_GAIN)
        if self.config.budget_steps is not None:
            # Under a step budget a longer run is a continuation judged in one piece: more
            # of the same, one chunk at a time, asks the gate the same question for less.
            proposals = [p for p in proposals if p.field != "grpo.max_steps"]
        # When to change is the loop's call, what to change the proposer's: another
        # proposer is asked only in a round where the rules' best change would beat more of
        # the same, and the change it chooses is tried first.
        if self.config.proposer.kind != "rules" and not (continuation not in existing and (
                not proposals or more_of_the_same > expected_gain(proposals[0], harness.spec, trend, diagnosed,
                                                                  inconclusive, stalled_run))):  # fmt: skip
            context = RoundContext(
                incumbent, len(candidates), self.config.domain, tuple(self.domain.proposable_components),
                harness.spec, diagnosed, diagnosis.payload if diagnosis else None, library, proposals,
                _outcomes(decisions), _rejected_in_a_row(decisions),
            )  # fmt: skip
            proposals = round_proposals(self.store, self.config.proposer, context, self.say)
        # Where a backtest replays rollouts: the best so far's own, or, for the untrained
        # start, a rejected candidate's that showed a validity condition, else its
        # continuation's (the same policy and harness).
        backtest_evidence = None
        if not any(e.type == "RolloutsRecorded" for e in history):
            has_rollouts = any(e.type == "RolloutsRecorded" for e in tried)
            backtest_evidence = seen_on or (BranchRef(self.config.name, continuation) if has_rollouts else None)
        queue = list(proposals)
        while queue:
            proposal = queue.pop(0)
            gain = expected_gain(proposal, harness.spec, trend, diagnosed, inconclusive, stalled_run)
            chosen = proposal.reply_id is not None  # a proposer's own choice does not yield to more of the same
            if not chosen and continuation not in existing and more_of_the_same > gain:
                return self._continue(incumbent, continuation)
            if proposal.field.startswith("evaluation."):
                continue  # measuring differently changes no policy: only a second look uses it
            steps = harness.spec.with_field(proposal.field, proposal.value).grpo.max_steps
            if not self._affordable(spent, steps, quiet=True):
                continue  # a longer run than the budget has left
            designed = design_intervention(harness.spec, {proposal.field: proposal.value},
                                           hypothesis=proposal.hypothesis, success_criterion=proposal.criterion,
                                           rollback_plan=proposal.rollback, proposer=proposal.proposer)  # fmt: skip
            ident = designed.event.intervention_id
            name = _branch_name(proposal, current_value(harness.spec, proposal.field), ident)
            if name in existing or _dropped(history, ident):
                continue  # tried already
            self.store.append(incumbent, [*harness.unrecorded_default(), NewEvent.of(
                designed.event, idempotency_key=f"intervention:{ident}", causation_id=proposal.reply_id)])  # fmt: skip
            change = f"{proposal.field}: {designed.event.old_value!r} -> {designed.event.new_value!r}"
            by = "" if proposal.proposer == "builtin" else f", by {proposal.proposer}"
            self.say(f"{incumbent}: proposed {ident} ({change}, for {proposal.trigger}{by})")
            if not self._survives_backtest(incumbent, designed.event, backtest_evidence):
                continue
            if needs_approval(self.config.proposer, proposal.proposer, _rejected_in_a_row(decisions)):
                figures = next((e.payload.get("figures") for e in reversed(self._history(incumbent))
                                if e.type == "BacktestCompleted" and e.payload["intervention_id"] == ident), None)
                answer = intervention_answer(self.store, self.config.proposer, incumbent, designed.event,
                                             _rejected_in_a_row(decisions), figures)  # fmt: skip
                if answer.payload["decision"] != "approved":
                    revised = answered_proposal(answer, None, "human", diagnosed)
                    self.say(f"{incumbent}: {ident} {answer.payload['decision']} by {answer.actor}")
                    queue[:0] = [revised] if revised is not None else []
                    continue
            forked = fork_for_intervention(self.store, incumbent, name, ident)
            self.say(f"{incumbent}: forked {self.config.name}/{name} at seq {forked.forked.payload['fork_seq']}")
            return BranchRef(self.config.name, name)
        if continuation not in existing:
            return self._continue(incumbent, continuation)
        self.say(f"nothing left to propose for {incumbent}: stopping after {len(candidates)} candidate versions")
        return None

    def _exploit_now(self, incumbent: BranchRef, spent: int, chunk: int, decisions: list[StoredEvent]) -> bool:
        """Whether more of the best so far's own recipe should come before any change but a
        validity repair: when the budget has one chunk left (a change that loses then
        cannot be followed by anything, so the last chunk goes to the candidate least
        likely to lose), and right after a change was rejected against the best so far
        (its recipe is still the best known: go on with it before trying another)."""
        if self.config.budget_steps is not None and not self._affordable(spent, 2 * chunk, quiet=True):
            return True
        if not decisions or decisions[-1].payload["decision"] != "rejected":
            return False
        last = decisions[-1].payload
        return last.get("evidence", {}).get("incumbent") == str(incumbent) and last.get("intervention_id") is not None

    def _second_look(self, incumbent: BranchRef, existing: set[str], decisions: list[StoredEvent]) -> BranchRef | None:
        """Judge the candidate the gate just rejected for want of power again, with twice
        the problems or, where the held-out split has no more, twice the samples per
        problem (_more_power): a fork of that candidate which trains nothing
        (is_second_look), its trained policy evaluated anew and the best so far
        re-evaluated the same way. None when the last rejection was against another
        incumbent, was a second look itself, or the protocol is at its limits.

        A second look is a second test of one policy: at the gate's 95% two-sided interval
        each look wrongly promotes a no-gain chunk at most 2.5% of the time, so with one
        second look per policy at most 5%."""
        last = decisions[-1].payload
        if last.get("evidence", {}).get("incumbent") != str(incumbent):
            return None
        rejected = BranchRef.parse(last["candidate"], allow_seq=False)
        rejected_history = self._history(rejected)
        source = harness_of(rejected_history)
        more = self._more_power(source.spec)
        if more is None or is_second_look(rejected_history, rejected):
            return None  # one second look per policy: each look is another chance of a false promotion
        field, value = more
        what = "problem is sampled twice as often" if field == "evaluation.k" else "look holds twice the problems"
        hypothesis = (f"if each {what}, the gate tells this chunk's gain from noise, "
                      "because its interval straddled the margin with a positive mean")
        designed = design_intervention(source.spec, {field: value}, hypothesis=hypothesis, proposer="builtin")
        ident = designed.event.intervention_id
        name = f"second-look-{ident.removeprefix('iv-')[:6]}"
        if name in existing:
            return None
        self.store.append(rejected, [*source.unrecorded_default(),
                                     NewEvent.of(designed.event, idempotency_key=f"intervention:{ident}")])
        forked = fork_for_intervention(self.store, rejected, name, ident)
        self.say(f"{rejected}: rejected for want of power: a second look at its policy with {field} "
                 f"{designed.event.old_value} -> {designed.event.new_value} ({self.config.name}/{name}, forked at seq "
                 f"{forked.forked.payload['fork_seq']}, trains nothing)")  # fmt: skip
        return BranchRef(self.config.name, name)

    def _continuation_events(self, continuation: str, existing: set[str]) -> list[StoredEvent]:
        """The best so far's continuation's own events (its run, its diagnosis), where one
        was forked."""
        if continuation not in existing:
            return []
        ref = BranchRef(self.config.name, continuation)
        return own_events(self._history(ref), ref)

    def _more_power(self, spec: HarnessSpec) -> tuple[str, int] | None:
        """The change that halves the variance of the gate's gain estimate: twice the
        problems where the held-out split holds that many distinct ones, else twice the
        samples per problem. Problems first because the variance is (between-problem +
        within-problem / k) / problems: more samples shrink only the second part, and on
        the shipped levels the first dominates (per-problem gains differ by about 0.25)."""
        ev = spec.evaluation
        if 2 * ev.eval_tasks <= MAX_EVALUATION_PROBLEMS and holds_distinct(self.domain, 2 * ev.eval_tasks, 0):
            return "evaluation.eval_tasks", 2 * ev.eval_tasks
        if ev.k < MAX_EVALUATION_SAMPLES:
            return "evaluation.k", min(2 * ev.k, MAX_EVALUATION_SAMPLES)
        return None

    def _continue(self, incumbent: BranchRef, name: str) -> BranchRef:
        forked = fork_to_continue(self.store, incumbent, name)
        self.say(f"{incumbent}: forked {self.config.name}/{name} at seq {forked.payload['fork_seq']} "
                 "to train further under the same harness")  # fmt: skip
        return BranchRef(self.config.name, name)

    def _affordable(self, spent: int, steps: int, quiet: bool = False) -> bool:
        budget = self.config.budget_steps
        if budget is None or spent + steps <= budget:
            return True
        if not quiet:
            self.say(f"budget spent: {spent} of {budget} GRPO steps used, a candidate needs {steps}")
        return False

    def judge(self, candidate: BranchRef) -> None:
        try:
            self.complete(candidate)
            self._baseline_under_candidates_protocol(candidate)
        except (TaskFailedError, UsageError) as exc:
            # The change broke its own run (or cannot make one): negative evidence, and the
            # loop goes on.
            stored = reject_unrunnable(self.store, candidate, str(exc))
        else:
            stored = self._promote(candidate)
        self.say(f"{candidate}: {stored.payload['reason']}")
        # Every verdict is signed into the record at once: a rewrite of anything up to it
        # (by a superuser who re-hashes the chain) fails `audit` from now on.
        anchor_experiment(self.store, self.config.name)

    def _promote(self, candidate: BranchRef) -> StoredEvent:
        """Record the gate's verdict; under `approve-promotions` a promotion waits for a
        person, whose abort is recorded as the gate's rejection (gates.vetoed)."""
        if self.config.proposer.autonomy == "approve-promotions":
            decision = decide_promotion(self.store, candidate)
            if decision.promoted:
                answer = promotion_answer(self.store, candidate, decision)
                if answer.payload["decision"] != "approved":
                    return self.store.append(decision.record_on, [vetoed(decision, answer)])[0]
        return record_promotion(self.store, candidate)[1]

    def _baseline_under_candidates_protocol(self, candidate: BranchRef) -> None:
        """A candidate that changed the evaluation protocol (more samples, more problems) is
        compared with the best so far measured the same way: the incumbent's policy is
        evaluated again under the new protocol first (scores measured differently are
        never compared)."""
        protocol = self._protocol(harness_of(self._history(candidate)).spec)
        incumbent = incumbent_of(self.store, self.config.name)
        history = self._history(incumbent)
        policy = newest_policy(history)
        if policy is not None and not any(e.type == "EvaluationRecorded" and e.payload["policy_sha256"] == policy
                                          and evaluation_protocol(e) == protocol for e in history):  # fmt: skip
            self._evaluate(incumbent, policy, protocol)

    def summary(self, candidates: list[BranchRef]) -> RunSummary:
        best = incumbent_of(self.store, self.config.name)
        history = self._history(best)
        policy = newest_policy(history)
        protocol = self._protocol(harness_of(history).spec)
        scores = [e.payload["avg_at_k"] for e in history if e.type == "EvaluationRecorded"
                  and e.payload["policy_sha256"] == policy and evaluation_protocol(e) == protocol]  # fmt: skip
        promoted = sum(e.payload["decision"] == "promoted" for e in self._decisions())
        return RunSummary(best, scores[-1] if scores else None, len(candidates), promoted,
                          self.steps_spent(candidates), policy)  # fmt: skip

    # -- helpers -------------------------------------------------------------------

    def _history(self, branch: BranchRef) -> list[StoredEvent]:
        """The branch's history as the loop reads it: results count only when a task or
        their command produced them (lineage.provenance), never one appended by hand."""
        return from_work(self.store.read_branch(branch))

    def _protocol(self, spec: HarnessSpec) -> dict[str, Any]:
        return selection_protocol(self.config.domain, spec)

    def _train(self, branch: BranchRef, history: list[StoredEvent], spec: HarnessSpec, address: str) -> None:
        """Train the branch's newest policy further. Each run of a chain draws its data in a
        new order (the seed moves on by the steps the chain trained already), as one long
        run would, instead of replaying the first steps' prompts every time."""
        trained = sum(int(e.payload["steps"]) for e in history if e.type == "TrainingCompleted")
        policy = newest_policy(history) or self.config.policy
        settings = spec.to_grpo_settings(seed=spec.grpo.seed + trained).to_dict()
        inputs = {"domain": self.config.domain, "policy": policy, "settings": settings,
                  "train_tasks": self.config.train_tasks, "harness_hash": address}  # fmt: skip
        produced = self._task(branch, "train", inputs)
        summary = next(e.payload["summary"] for e in produced if e.type == "RolloutsRecorded")
        dead, reward = summary.get("dead_group_ratio", 0), summary.get("mean_reward", 0)
        self.say(f"{branch}: trained {spec.grpo.max_steps} steps, dead groups {dead:.0%}, mean reward {reward:.3f}")

    def _evaluate(
        self, branch: BranchRef, policy: str, protocol: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        protocol = protocol or self._protocol(harness_of(self._history(branch)).spec)
        produced = self._task(branch, "evaluate", {**protocol, "policy": policy, **(extra or {})})
        score = next(e.payload for e in produced if e.type == "EvaluationRecorded")
        self.say(f"{branch}: {score['metric']} = {score['avg_at_k']:.3f} on {score['problems']} selection problems")

    def _task(self, branch: BranchRef, kind: str, inputs: dict[str, object]) -> list[StoredEvent]:
        return run_task(self.store, branch, kind, inputs, self.config.task_timeout_s)

    def _survives_backtest(
        self, incumbent: BranchRef, proposal: InterventionProposed, evidence_branch: BranchRef | None = None
    ) -> bool:
        """Backtest the proposal on the best so far's latest evidence (or `evidence_branch`'s,
        when the best so far trained nothing itself); False, said why, when refuted."""
        ident = proposal.intervention_id
        try:
            backtest_kind(proposal.field)
        except NotBacktestableError:
            return True  # nothing can judge it before training: the gate will
        inputs: dict[str, object] = {"intervention_id": ident, "domain": self.config.domain}
        if evidence_branch is not None:
            inputs["evidence_branch"] = str(evidence_branch)
        produced = self._task(incumbent, "backtest", inputs)
        try:
            check_backtest(self._history(incumbent), incumbent, proposal)
        except UsageError as exc:
            self.say(f"{incumbent}: dropped {ident}: {exc}")
            return False
        figures = next(e.payload.get("figures", {}) for e in produced if e.type == "BacktestCompleted")
        shown = {k: v for k, v in figures.items() if k in _BACKTEST_HEADLINES}
        listed = ", ".join(f"{k} {v}" for k, v in shown.items())
        self.say(f"{incumbent}: backtest of {ident} did not refute it ({listed})")
        return True

    def _validity_conditions_against(
        self, incumbent: BranchRef, decisions: list[StoredEvent]
    ) -> tuple[BranchRef | None, list[str]]:
        """Validity conditions (a gamed reward, a leak) diagnosed on candidates the gate
        rejected against the best so far, and the latest such candidate (its run is the
        evidence a backtest of the repair replays). They describe the harness the candidate
        shared with the best so far, not the chunk's luck: the first chunk that games a
        bonus is rejected, and the bonus is why the next change is made."""
        found: list[str] = []
        seen_on = None
        for decided in decisions:
            evidence = decided.payload.get("evidence", {})
            if decided.payload["decision"] != "rejected" or evidence.get("incumbent") != str(incumbent):
                continue
            diagnosis_id = evidence.get("diagnosis", {}).get("event_id")
            candidate = BranchRef.parse(decided.payload["candidate"], allow_seq=False)
            for event in self._history(candidate):
                shown = [c for c in event.payload.get("conditions", []) if c in VALIDITY_CONDITIONS]
                if event.event_id == diagnosis_id and shown:
                    found += [c for c in shown if c not in found]
                    seen_on = candidate
        return seen_on, found

    def _decisions(self) -> list[StoredEvent]:
        """Every gate verdict of the experiment, oldest first (not one appended by hand)."""
        return gate_decisions(self.store, self.config.name)


def _last_verdict_inconclusive(decisions: list[StoredEvent]) -> bool:
    """Whether the latest rejection was for want of power: a positive mean gain whose
    interval reached below the gate's margin (a real gain the gate could not see)."""
    if not decisions or decisions[-1].payload["decision"] != "rejected":
        return False
    last = decisions[-1].payload
    if last.get("evidence", {}).get("veto"):
        return False  # a person's veto is no want of power (gates.vetoed)
    paired = last.get("evidence", {}).get("per_problem") or {}
    interval = paired.get("interval")
    return bool(interval and not last.get("blocking_findings") and (last.get("margin") or 0) > 0
                and interval[1] > 0)  # fmt: skip


def _outcomes(decisions: list[StoredEvent]) -> list[str]:
    """One line per verdict, for a proposer to read: the candidate and the gate's reason."""
    return [f"{e.payload['candidate']}: {e.payload['reason'][:200]}" for e in decisions]


def _rejected_in_a_row(decisions: list[StoredEvent]) -> int:
    count = 0
    for event in reversed(decisions):
        if event.payload["decision"] != "rejected":
            break
        count += 1
    return count


def selection_protocol(domain: str, spec: HarnessSpec, part: str = "selection") -> dict[str, Any]:
    """The evaluation protocol of a harness, in the fields the gate compares: an evaluation
    someone ran by hand with other settings is not this one. The gate selects on the
    held-out split's selection half; `part="test"` is the same protocol on the other half,
    for final reports."""
    ev = spec.evaluation
    return {"domain": domain, "k": ev.k, "eval_tasks": ev.eval_tasks, "temperature": ev.temperature,
            "max_completion_length": ev.max_completion_length, "seed": ev.seed, "data_seed": 0,
            "part": part}  # fmt: skip


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

