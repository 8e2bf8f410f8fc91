"""The promotion gate: a candidate branch replaces the best so far only if it beats it on
the same evaluation protocol by the gate's margin, with no blocking diagnostic.

    decision, event = record_promotion(store, BranchRef("demo", "lr-up"))
    decision.promoted, event.payload["reason"]

What it takes (DESIGN.md step 7, METHOD.md "Promotion and invalid branches"):
- The best so far (the incumbent) is the candidate most recently promoted on
  EXPERIMENT/main, where every decision is recorded; before any promotion it is main.
- The candidate must hold training the incumbent does not (its own run, or for a second
  look the run of the branch it re-judges), a diagnosis of that run's evidence, and an
  evaluation of its newest policy. The baseline is an evaluation of the
  policy that won (the incumbent's newest when it was promoted; main's newest before any
  promotion) under the same protocol (domain, k, problems, temperature, completion
  length, seeds): scores measured differently are never compared.
- It is promoted when its score minus the baseline's is positive and at least the gate's
  `min_margin`, and nothing in its diagnosis blocks. Both are the incumbent's, never the
  candidate's own: the incumbent's gate, and its diagnostic thresholds, with which the
  candidate's measurements are graded again (an analyzer the incumbent runs and the
  candidate's harness turned off blocks). An intervention that loosened the gate or a
  threshold does not get to judge itself by it.
- The decision is appended with main's head as the expected seq, so two gates deciding at
  once cannot both promote against one incumbent: the later one decides again against the
  winner (up to MAX_ATTEMPTS times while main keeps moving, then ConcurrencyError).
  Deciding again on the same evidence under the same gate is a no-op (idempotency key).
- Recorded with it, for the auditor: which evaluations and diagnosis were compared, the
  gate, the intervention's success criterion checked with the figures known now
  (`avg_at_k_gain` and its backtest's), and, when both per-problem result artifacts are at
  hand, how many problems got better or worse and the paired standard error of the gain.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evotrainer.artifacts import ArtifactStore, open_store
from evotrainer.artifacts.errors import ArtifactMissingError
from evotrainer.diagnostics.base import grade
from evotrainer.diagnostics.diagnose import blocking_reasons
from evotrainer.diagnostics.rules import conditions
from evotrainer.errors import ConcurrencyError, EvotrainerError, UsageError
from evotrainer.events import Finding, PromotionDecided, SkillRecorded
from evotrainer.evolve.bootstrap import bootstrap_interval
from evotrainer.evolve.skills import skill_event, trigger_of
from evotrainer.evolve.tasks import lost_to_faults
from evotrainer.harness.criterion import check_criterion
from evotrainer.harness.spec import HarnessSpec
from evotrainer.harness.versions import harness_of
from evotrainer.lineage.provenance import from_work
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, GlobalPosition, NewEvent, StoredEvent

DECISIONS_BRANCH = "main"
PROTOCOL_FIELDS = ("domain", "k", "eval_tasks", "temperature", "max_completion_length", "seed", "data_seed", "part")
MAX_ATTEMPTS = 5
"""Decisions to try when other appends to main keep moving its head."""
_SCORE_TOLERANCE = 1e-9
"""Avg@k is a fraction: 0.35 - 0.34 is 0.00999... in floating point, and must meet 0.01."""


@dataclass(frozen=True)
class PromotionDecision:
    """A decision, not yet recorded: where it goes and what it says."""

    record_on: BranchRef
    expected_seq: int
    """Head of `record_on` when the incumbent was read."""
    incumbent: BranchRef
    decided: PromotionDecided
    idempotency_key: str
    skill: SkillRecorded | None = None
    """What the verdict teaches, for a candidate that tested an intervention."""

    @property
    def promoted(self) -> bool:
        return self.decided.decision == "promoted"

    def events(self) -> list[NewEvent]:
        events = [NewEvent.of(self.decided, idempotency_key=self.idempotency_key)]
        if self.skill is not None:
            # One run is one outcome: judged again (another incumbent or gate), the branch gets
            # a new decision but its skill keeps the first verdict.
            events.append(NewEvent.of(self.skill, idempotency_key=f"skill:{self.decided.candidate}"))
        return events


def record_promotion(
    store: EventStore, candidate: BranchRef, artifacts: ArtifactStore | None = None
) -> tuple[PromotionDecision, StoredEvent]:
    """Decide and append the decision to EXPERIMENT/main; the stored event is the earlier
    one when the same evidence was already judged."""
    for _ in range(MAX_ATTEMPTS - 1):
        try:
            return _decide_and_record(store, candidate, artifacts)
        except ConcurrencyError:
            continue  # main moved (perhaps another promotion): decide against what it says now
    return _decide_and_record(store, candidate, artifacts)


def _decide_and_record(
    store: EventStore, candidate: BranchRef, artifacts: ArtifactStore | None
) -> tuple[PromotionDecision, StoredEvent]:
    decision = decide_promotion(store, candidate, artifacts)
    events = decision.events()
    if decision.skill is not None and _judged_for_a_fault(store, decision.record_on, decision.decided.candidate):
        # Its skill's key holds the outcome an earlier version recorded for a fault, which
        # skill_library leaves out: this verdict is the candidate's one outcome.
        events[1] = dataclasses.replace(events[1], idempotency_key=f"skill:{decision.decided.candidate}:after-fault")
    stored = store.append(decision.record_on, events, expected_seq=decision.expected_seq)[0]
    # The earlier event when this evidence was judged already: report what is recorded.
    return dataclasses.replace(decision, decided=PromotionDecided.model_validate(stored.payload)), stored


def decide_promotion(
    store: EventStore, candidate: BranchRef, artifacts: ArtifactStore | None = None
) -> PromotionDecision:
    """The gate's decision on `candidate`; UsageError when the evidence it needs is missing."""
    candidate = candidate.branch_ref
    incumbent, main_head, promoting = _incumbent(store, candidate.experiment)
    if candidate == incumbent:
        return _decision_that_promoted(candidate, main_head, promoting)
    # Only results that a task or their command produced are evidence (lineage.provenance).
    history = from_work(store.read_branch(candidate))
    incumbent_history = from_work(store.read_branch(incumbent))
    diagnosis = _diagnosis_of_candidates_run(history, candidate, incumbent_history)
    evaluation = _evaluation_of_newest_policy(history, candidate, "")
    protocol = evaluation_protocol(evaluation)
    # The best so far is the policy that won, not whatever its branch trained since.
    won_at = promoting.global_position if promoting is not None else None
    baseline = _evaluation_of_newest_policy(incumbent_history, incumbent, " (the best so far)", protocol, won_at)
    harness = harness_of(incumbent_history)
    gate = harness.spec.promotion

    score, base_score = float(evaluation.payload["avg_at_k"]), float(baseline.payload["avg_at_k"])
    margin = score - base_score
    blocking = _blocking(diagnosis, harness.spec)
    paired = paired_results(artifacts, evaluation.payload["results_sha256"], baseline.payload["results_sha256"],
                            confidence=gate.confidence, samples=gate.bootstrap_samples)  # fmt: skip
    low = paired["interval"][0] if paired and paired.get("interval") else None
    beats = low is not None and low > gate.min_margin + _SCORE_TOLERANCE
    metric = evaluation.payload["metric"]
    interval = (f"{gate.confidence:.0%} interval of the gain [{paired['interval'][0]:+.4f}, "
                f"{paired['interval'][1]:+.4f}]" if low is not None and paired else "no per-problem interval")
    comparison = (f"{metric} {score:.4f} against {base_score:.4f} of {incumbent} "
                  f"(gain {margin:+.4f}, {interval}, must clear {gate.min_margin:g})")
    if blocking:
        reason = f"rejected: blocking diagnostic ({'; '.join(blocking)}); {comparison}"
    elif low is None:
        reason = ("rejected: the per-problem results of both evaluations are needed for the gate's interval; "
                  f"{comparison}")
    elif not beats:
        reason = f"rejected: does not beat the best so far beyond noise; {comparison}"
    else:
        reason = f"promoted: {comparison}, no blocking diagnostic"

    proposed = intervention_of(history, candidate)
    proposal = proposed.payload if proposed is not None else None
    evidence: dict[str, Any] = {
        "incumbent": str(incumbent),
        "candidate_evaluation": _evaluation_summary(evaluation),
        "baseline_evaluation": _evaluation_summary(baseline),
        "diagnosis": {"event_id": diagnosis.event_id, "evidence": diagnosis.payload["evidence"]},
        "protocol": protocol,
        "gate": {"harness_hash": harness.address, **gate.model_dump(mode="json")},
        "per_problem": paired,
    }  # fmt: skip
    if proposal is not None:
        evidence["criterion"] = _verify_criterion(history, proposal, margin)
    promoted = beats and not blocking
    decided = PromotionDecided(
        candidate=str(candidate), decision="promoted" if promoted else "rejected",
        baseline_score=base_score, candidate_score=score, margin=margin, blocking_findings=blocking,
        intervention_id=proposal["intervention_id"] if proposal else None, evidence=evidence, reason=reason,
    )  # fmt: skip
    key = decision_key(str(candidate), str(incumbent), harness.address, evaluation.event_id, baseline.event_id,
                       diagnosis.event_id)  # fmt: skip
    skill = None
    if proposed is not None:
        skill = skill_event(proposed, trigger_of(history, proposed), str(protocol["domain"]), promoted, margin)
    return PromotionDecision(BranchRef(candidate.experiment, DECISIONS_BRANCH), main_head, incumbent, decided, key,
                             skill)  # fmt: skip


def decision_key(candidate: str, incumbent: str, harness_hash: str, evaluation_id: str, baseline_id: str,
                 diagnosis_id: str) -> str:  # fmt: skip
    """Everything the verdict depends on: the same key is the same decision."""
    return f"promotion:{candidate}:{incumbent}:{harness_hash}:{evaluation_id}:{baseline_id}:{diagnosis_id}"


def _decision_that_promoted(candidate: BranchRef, main_head: int, promoting: StoredEvent | None) -> PromotionDecision:
    """Asked about the best so far (a retried task, a script run twice): the decision that
    made it the best, which recording again leaves as it is."""
    judged_against = promoting.payload.get("evidence", {}).get("incumbent") if promoting is not None else None
    if promoting is None or judged_against is None or not promoting.idempotency_key:
        where = f" (promoted at {promoting.ref})" if promoting is not None else ""
        raise UsageError(f"{candidate} is the best so far already{where}: there is nothing to compare it with")
    return PromotionDecision(
        promoting.ref.branch_ref, main_head, BranchRef.parse(judged_against, allow_seq=False),
        PromotionDecided.model_validate(promoting.payload), promoting.idempotency_key,
    )  # fmt: skip


def _blocking(diagnosis: StoredEvent, incumbent: HarnessSpec) -> list[str]:
    """What blocks the candidate under the incumbent's diagnostics and gate. The candidate's
    diagnosis ran under its own harness, whose thresholds an intervention may have moved or
    whose analyzers it may have turned off: its measurements are graded again with the
    incumbent's thresholds, an analyzer the incumbent runs and the diagnosis lacks blocks,
    and the conditions are those the rules find now plus those recorded."""
    recorded = [Finding.model_validate(f) for f in diagnosis.payload.get("findings", [])]
    by_analyzer = {f.analyzer: f for f in recorded}
    graded, unmeasured = [], []
    for name, settings in sorted(incumbent.diagnostics.items()):
        found = by_analyzer.pop(name, None)
        if not settings.enabled:
            continue
        if found is None:
            unmeasured.append(f"{name} not measured")
            continue
        graded.append(found.model_copy(update={"severity": grade(found.value, settings)}))
    graded.extend(by_analyzer.values())  # the candidate's own extra analyzers can only add
    names = [c.name for c in conditions(graded)]
    names += [c for c in diagnosis.payload.get("conditions", []) if c not in names]
    return blocking_reasons(graded, names, incumbent.promotion) + unmeasured


def reject_unrunnable(store: EventStore, candidate: BranchRef, why: str) -> StoredEvent:
    """Record that a candidate could not be judged because its work failed (a training run
    its intervention broke): rejected, with the failure as the reason and as a failure of
    its skill. Once per candidate."""
    candidate = candidate.branch_ref
    history = store.read_branch(candidate)
    incumbent = incumbent_of(store, candidate.experiment)
    proposed = intervention_of(history, candidate)
    decided = PromotionDecided(
        candidate=str(candidate), decision="rejected", blocking_findings=[],
        intervention_id=proposed.payload["intervention_id"] if proposed is not None else None,
        evidence={"incumbent": str(incumbent), "failure": why}, reason=f"rejected: {why}",
    )  # fmt: skip
    key = unrunnable_key(str(candidate))
    events = [NewEvent.of(decided, idempotency_key=key)]
    if proposed is not None:
        domain = store.read_branch(BranchRef(candidate.experiment, DECISIONS_BRANCH))[0].payload.get("domain", "")
        skill = skill_event(proposed, trigger_of(history, proposed), str(domain), False, None, "its run failed")
        events.append(NewEvent.of(skill, idempotency_key=f"skill:{candidate}"))
    return store.append(BranchRef(candidate.experiment, DECISIONS_BRANCH), events)[0]


def unrunnable_key(candidate: str) -> str:
    return f"promotion:{candidate}:unrunnable"


def _judged_for_a_fault(store: EventStore, main: BranchRef, candidate: str) -> bool:
    """Whether `candidate` was rejected as unrunnable because its workers died."""
    key = unrunnable_key(candidate)
    return any(e.idempotency_key == key and lost_to_faults(str(e.payload.get("evidence", {}).get("failure", "")))
               for e in store.read_branch(main))  # fmt: skip


def incumbent_of(store: EventStore, experiment: str) -> BranchRef:
    """The best so far: the latest candidate the gate promoted on main, else main."""
    return _incumbent(store, experiment)[0]


def _incumbent(store: EventStore, experiment: str) -> tuple[BranchRef, int, StoredEvent | None]:
    """The best so far, the head seq of main it was read at, and the decision that
    promoted it (None for main itself)."""
    main = BranchRef(experiment, DECISIONS_BRANCH)
    # The head first, then the decisions up to it: a decision appended in between moves
    # the head past what was judged, so an append that expects this head fails.
    head = store.head(main)[0]
    # Only promotions can make a best so far (a rejection never changes the incumbent
    # judged_by_the_gate carries), so the rejections, most of a long experiment's
    # decisions, are not read. (PromotionDecided has one payload version.)
    promotions = store.read_branch(main, upto_seq=head, types=DECISIONS, payload_contains={"decision": "promoted"})
    judged = judged_by_the_gate(store, promotions)
    promoting = next((e for e, why in reversed(judged) if why is None and e.payload["decision"] == "promoted"), None)
    if promoting is None:
        return main, head, None
    return BranchRef.parse(promoting.payload["candidate"], allow_seq=False), head, promoting


def gate_decisions(store: EventStore, experiment: str) -> list[StoredEvent]:
    """Every verdict the gate recorded on EXPERIMENT/main, oldest first (see judged_by_the_gate)."""
    main = BranchRef(experiment, DECISIONS_BRANCH)
    return [e for e, why in judged_by_the_gate(store, store.read_branch(main, types=DECISIONS)) if why is None]


# What judged_by_the_gate reads of main's history (its other events are skipped).
DECISIONS = ("PromotionDecided",)


def judged_by_the_gate(store: EventStore, main_history: list[StoredEvent]) -> list[tuple[StoredEvent, str | None]]:
    """Each PromotionDecided of main's history with why it is not the gate's verdict (None:
    it is). A verdict counts when it carries the key the gate derives from its evidence;
    a promotion, which makes a new best so far, also when that evidence holds: it was judged
    against the best so far of its moment, the evaluations and the diagnosis it names are
    in the record as results of work, with the scores it states, and they clear the gate
    it names. A PromotionDecided appended by hand is none of this, and no best so far."""
    incumbent = BranchRef(main_history[0].experiment, DECISIONS_BRANCH) if main_history else None
    histories: dict[str, list[StoredEvent]] = {}

    def history(ref: str) -> list[StoredEvent]:
        if ref not in histories:
            histories[ref] = from_work(store.read_branch(BranchRef.parse(ref, allow_seq=False)))
        return histories[ref]

    judged = []
    for event in main_history:
        if event.type != "PromotionDecided":
            continue
        try:
            why = _not_the_gates(event, str(incumbent), history)
        except (EvotrainerError, KeyError, TypeError, ValueError) as exc:
            why = f"its evidence cannot be read ({type(exc).__name__}: {exc})"
        if why is None and event.payload["decision"] == "promoted":
            incumbent = BranchRef.parse(event.payload["candidate"], allow_seq=False)
        judged.append((event, why))
    return judged


def _not_the_gates(
    decided: StoredEvent, incumbent: str, history: Callable[[str], list[StoredEvent]]
) -> str | None:
    p = decided.payload
    evidence, candidate = p.get("evidence") or {}, p["candidate"]
    if decided.idempotency_key == unrunnable_key(candidate):
        if lost_to_faults(str(evidence.get("failure", ""))):
            return "recorded because its workers died (its work ran out of attempts): a fault, not a verdict"
        return None if p["decision"] == "rejected" and "failure" in evidence else "a promotion keyed as unrunnable"
    roles = ("candidate_evaluation", "baseline_evaluation", "diagnosis", "gate")
    if "incumbent" not in evidence or not all(isinstance(evidence.get(role), dict) for role in roles):
        return "recorded without the gate's evidence"
    ids = [evidence[role]["event_id"] for role in roles[:3]]
    key = decision_key(candidate, evidence["incumbent"], evidence["gate"]["harness_hash"], *ids)
    if decided.idempotency_key != key:
        return "not recorded by the gate (its key is not the one the gate derives from its evidence)"
    if p["decision"] != "promoted":
        return None
    if evidence["incumbent"] != incumbent:
        return f"judged against {evidence['incumbent']}, but the best so far then was {incumbent}"
    evaluation_id, baseline_id, diagnosis_id = ids
    found = {e.event_id: e for e in history(candidate)}
    baseline = {e.event_id: e for e in history(incumbent)}.get(baseline_id)
    for role, event, kind, score in (
        ("candidate evaluation", found.get(evaluation_id), "EvaluationRecorded", p.get("candidate_score")),
        ("baseline evaluation", baseline, "EvaluationRecorded", p.get("baseline_score")),
        ("diagnosis", found.get(diagnosis_id), "DiagnosisRecorded", None),
    ):
        if event is None or event.type != kind:
            return f"its {role} is not a result of work in the record"
        if score is not None and event.payload["avg_at_k"] != score:
            return f"its {role} scored {event.payload['avg_at_k']}, not the {score} it states"
    interval = (evidence.get("per_problem") or {}).get("interval")
    min_margin = float(evidence["gate"]["min_margin"])
    if p.get("blocking_findings") or not interval or not interval[0] > min_margin:
        return "its evidence does not clear the gate it names"
    return None


def own_events(history: list[StoredEvent], ref: BranchRef) -> list[StoredEvent]:
    """The events a branch appended itself (not those its history inherits)."""
    return [e for e in history if e.experiment == ref.experiment and e.branch == ref.branch]


def newest_policy(history: list[StoredEvent], before: GlobalPosition | None = None) -> str | None:
    """The newest policy checkpoint in a history (the newest before a point of the log)."""
    return next((e.payload["policy_sha256"] for e in reversed(history) if e.type == "PolicyCheckpointed"
                 and (before is None or e.global_position < before)), None)  # fmt: skip


def _diagnosis_of_candidates_run(
    history: list[StoredEvent], candidate: BranchRef, incumbent_history: list[StoredEvent]
) -> StoredEvent:
    """The diagnosis of the training that makes the candidate differ from the best so far:
    its newest run that the incumbent's history does not hold. That is the candidate's own
    run, or for a second look (a fork that only measures differently) its source's."""
    held = {e.event_id for e in incumbent_history}
    runs = [e for e in history if e.type == "RolloutsRecorded" and e.event_id not in held]
    if not runs:
        raise UsageError(f"{candidate} has no training run of its own: train it (`evotrainer train {candidate}`) "
                         "before it is judged")  # fmt: skip
    evidence = runs[-1].payload["evidence_sha256"]
    diagnoses = [e for e in history if e.type == "DiagnosisRecorded" and e.payload["evidence"] == evidence]
    if not diagnoses:
        raise UsageError(f"{candidate}'s latest run (evidence {evidence[:12]}) has no diagnosis: run "
                         f"`evotrainer diagnose {candidate}` first")  # fmt: skip
    return diagnoses[-1]


def _evaluation_of_newest_policy(
    history: list[StoredEvent], ref: BranchRef, role: str, protocol: dict[str, Any] | None = None,
    before: GlobalPosition | None = None,
) -> StoredEvent:
    """The latest evaluation of the branch's newest policy (the newest `before` a point of
    the log when given; under `protocol` when given)."""
    policy = newest_policy(history, before)
    if policy is None:
        raise UsageError(f"{ref}{role} has no policy checkpoint to evaluate")
    for event in reversed(history):
        if (event.type == "EvaluationRecorded" and event.payload["policy_sha256"] == policy
                and (protocol is None or evaluation_protocol(event) == protocol)):  # fmt: skip
            return event
    wanted = f" under the candidate's protocol ({describe_protocol(protocol)})" if protocol else ""
    raise UsageError(f"{ref}{role} has no evaluation of its newest policy {policy[:12]}{wanted}: "
                     f"run `evotrainer evaluate {ref}` with those settings first")  # fmt: skip


def evaluation_protocol(evaluation: StoredEvent) -> dict[str, Any]:
    """What an evaluation was measured under: scores are compared only within one."""
    request = evaluation.payload["request"]
    return {name: request.get(name) for name in PROTOCOL_FIELDS}


def describe_protocol(protocol: dict[str, Any]) -> str:
    """`domain "math:digit_add", k 8, ...`: for messages."""
    return ", ".join(f"{name} {json.dumps(value)}" for name, value in protocol.items())


def _evaluation_summary(evaluation: StoredEvent) -> dict[str, Any]:
    p = evaluation.payload
    return {"event_id": evaluation.event_id, "branch": f"{evaluation.experiment}/{evaluation.branch}",
            "policy_sha256": p["policy_sha256"], "results_sha256": p["results_sha256"],
            "avg_at_k": p["avg_at_k"]}  # fmt: skip


def intervention_of(history: list[StoredEvent], candidate: BranchRef) -> StoredEvent | None:
    """The InterventionProposed behind the candidate's harness: what `fork_for_intervention`
    recorded as the cause of the branch's own HarnessVersioned."""
    by_id = {e.event_id: e for e in history}
    for event in reversed(own_events(history, candidate)):
        if event.type == "HarnessVersioned" and event.causation_id is not None:
            cause = by_id.get(event.causation_id)
            if cause is not None and cause.type == "InterventionProposed":
                return cause
    return None


def _verify_criterion(history: list[StoredEvent], proposal: dict[str, Any], margin: float) -> dict[str, Any]:
    """The intervention's criterion against what is known after training: the gain, and the
    figures of its latest backtest. success: every clause held; failure: one failed;
    partial: none failed, some could not be checked."""
    figures: dict[str, Any] = {}
    for event in history:
        if event.type == "BacktestCompleted" and event.payload["intervention_id"] == proposal["intervention_id"]:
            figures = dict(event.payload.get("figures", {}))
    figures["avg_at_k_gain"] = margin
    verdict = check_criterion(proposal["success_criterion"], figures)
    outcome = "failure" if verdict.failed else "success" if not verdict.unchecked else "partial"
    return {"text": proposal["success_criterion"], "held": list(verdict.held), "failed": list(verdict.failed),
            "unchecked": list(verdict.unchecked), "outcome": outcome}  # fmt: skip


def paired_results(
    artifacts: ArtifactStore | None, candidate_sha: str, baseline_sha: str, *, confidence: float = 0.95,
    samples: int = 2000,
) -> dict[str, Any] | None:
    """Problem by problem, the candidate's Avg@k against the baseline's (the same problems,
    by task id): how many improved or regressed, the mean gain with its paired standard
    error, and a paired bootstrap interval of the mean gain (`interval`, None with fewer
    than two problems). None when either results artifact is not in this artifact store."""
    store = artifacts or open_store()
    try:
        ours, theirs = per_problem(store.get(candidate_sha)), per_problem(store.get(baseline_sha))
    except ArtifactMissingError:
        return None
    common = sorted(set(ours) & set(theirs))
    gains = [ours[task] - theirs[task] for task in common]
    n = len(gains)
    mean = sum(gains) / n if n else 0.0
    stderr = math.sqrt(sum((g - mean) ** 2 for g in gains) / (n - 1) / n) if n > 1 else None
    interval = list(bootstrap_interval([gains], confidence, samples)) if n > 1 else None
    return {"problems": n, "better": sum(g > 0 for g in gains), "worse": sum(g < 0 for g in gains),
            "same": sum(g == 0 for g in gains), "mean_gain": mean, "standard_error": stderr,
            "interval": interval, "confidence": confidence, "bootstrap_samples": samples}  # fmt: skip


def per_problem(data: bytes) -> dict[str, float]:
    """Avg@k per task id, from an evaluation's results artifact."""
    rows = (json.loads(line) for line in data.splitlines() if line.strip())
    return {row["task_id"]: float(row["avg"]) for row in rows}
