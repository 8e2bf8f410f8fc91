"""The Python API: one client over the event store, for notebooks and scripts.

    import evotrainer

    with evotrainer.connect() as db:                  # EVOTRAINER_DATABASE_URL, or the embedded server
        db.experiments().to_pandas()
        db.sql("SELECT * FROM promotion_audit WHERE experiment = %s", ["demo"]).to_polars()

Every method validates its arguments as the CLI does and raises the errors of
evotrainer.errors with the CLI's one-line messages (the CLI's reading commands are this
client plus formatting). Reading methods import nothing heavy; run, compare, diagnose,
propose, fork with an intervention and promote import what their work needs when called.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evotrainer.client.results import (
    Audit,
    Backtest,
    Branch,
    BranchRow,
    Comparison,
    Diagnosis,
    EvaluationRow,
    Experiment,
    ExperimentRow,
    FindingRow,
    GateDecision,
    Harness,
    HarnessDiff,
    Lineage,
    LineageRow,
    PendingRow,
    Promotion,
    Proposal,
    Replay,
    ReplayedRow,
    RunResult,
    SkillRow,
    TaskOutcome,
    TrainingStepRow,
)
from evotrainer.client.tables import Table
from evotrainer.errors import NotFoundError, UsageError
from evotrainer.refs import BranchRef, check_name
from evotrainer.store import EventStore, NewEvent, StoredEvent

if TYPE_CHECKING:
    from evotrainer.client.work import Inputs
    from evotrainer.evolve.experiment_config import ExperimentConfig
    from evotrainer.evolve.gates import Decision

EVENT_COLUMNS: tuple[str, ...] = StoredEvent._fields


def connect(url: str | None = None, actor: str | None = None) -> Client:
    """Open the event store: `url`, else EVOTRAINER_DATABASE_URL, else the embedded server
    under EVOTRAINER_HOME (started on demand), its schema migrated on first use, as the
    CLI does. `actor` is recorded on what this client appends (default: EVOTRAINER_ACTOR,
    else user@host)."""
    return Client(EventStore.connect(url, actor))


class Client:
    """One connection's view of evotrainer's record. Not thread-safe: one client per thread.
    Close it (or use it as a context manager) when done."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        """The underlying EventStore, for what the client does not cover."""

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading ------------------------------------------------------------------

    def experiments(self) -> Table[ExperimentRow]:
        """Every experiment with its domain, description and creation time, oldest first."""
        rows = self.store.conn.execute(
            "SELECT experiment, domain, description, created_at FROM experiments ORDER BY created_at, experiment"
        ).fetchall()
        return Table(ExperimentRow._fields, [ExperimentRow(*row) for row in rows])

    def experiment(self, name: str) -> Experiment:
        """One experiment: what it was created with, and its branches."""
        check_name("experiment", name)
        infos = self.store.branches(name)
        if not infos:
            raise NotFoundError(f"no experiment {name}")
        created = self.store.read_branch(BranchRef(name, "main"), upto_seq=1)[0]
        p = created.payload
        rows = [self._branch_row(info.ref) for info in infos]
        return Experiment(name, p.get("domain"), p.get("description", ""), p.get("config") or {},
                          created.recorded_at, Table(BranchRow._fields, rows))  # fmt: skip

    def branch(self, ref: str) -> Branch:
        """EXPERIMENT/BRANCH: its parent, fork point and head."""
        branch = BranchRef.parse(ref, allow_seq=False)
        info = self.store.branch(branch)
        head_seq, head_hash = self.store.head(branch)
        parent = str(info.parent) if info.parent else None
        return Branch(str(branch), info.experiment, info.name, parent, info.fork_seq, head_seq, head_hash)

    def events(self, ref: str) -> Table[StoredEvent]:
        """The effective history of EXPERIMENT/BRANCH (inherited prefix included), or of
        EXPERIMENT/BRANCH@SEQ up to that seq; one row per event, payloads as dicts."""
        return Table(EVENT_COLUMNS, self.store.read_branch(BranchRef.parse(ref)))

    def evaluations(self, target: str) -> Table[EvaluationRow]:
        """Avg@k evaluations (EvaluationRecorded) of EXPERIMENT/BRANCH's history, or of every
        branch of EXPERIMENT (each event once, on the branch that recorded it)."""
        rows = []
        for e in self._events_of(target, "EvaluationRecorded"):
            p = e.payload
            part = p.get("request", {}).get("part")
            rows.append(EvaluationRow(e.experiment, e.branch, e.seq, p["policy_sha256"], p["metric"], p["avg_at_k"],
                                      p["pass_at_k"], p["k"], p["problems"], part, e.recorded_at))  # fmt: skip
        return Table(EvaluationRow._fields, rows)

    def training_metrics(self, target: str) -> Table[TrainingStepRow]:
        """Per-step GRPO metrics (TrainingCompleted.step_metrics) of EXPERIMENT/BRANCH's
        history, or of every branch of EXPERIMENT; one row per step and metric."""
        rows: list[TrainingStepRow] = []
        for e in self._events_of(target, "TrainingCompleted"):
            policy = e.payload["policy_sha256"]
            for step, metrics in enumerate(e.payload.get("step_metrics", []), start=1):
                at = int(metrics.get("step", step))
                rows.extend(TrainingStepRow(e.experiment, e.branch, e.seq, policy, at, name, value)
                            for name, value in metrics.items() if name != "step")  # fmt: skip
        return Table(TrainingStepRow._fields, rows)

    def sql(
        self, query: str, params: Sequence[Any] | Mapping[str, Any] | None = None, timeout_ms: int = 30_000
    ) -> Table[tuple[Any, ...]]:
        """One read-only query over the lineage's views and tables (the rules of `evotrainer
        sql`: a write, a second statement or a setting change is a ReadOnlyViolation).
        `params` fill %s placeholders (or %(name)s with a mapping)."""
        from evotrainer.lineage.projections import Projector
        from evotrainer.lineage.readonly import run_query

        Projector(self.store).catch_up()
        result = run_query(self.store.conn, query, timeout_ms, params)
        return Table(tuple(result.columns), result.rows)

    def lineage(self, experiment: str | None = None) -> Lineage:
        """The branch tree of EXPERIMENT (every experiment when None): each branch's fork
        point, status (incumbent: the best so far), head and scores."""
        from evotrainer.evolve.promotion import incumbent_of
        from evotrainer.lineage.dag import LineageDAG
        from evotrainer.lineage.projections import Projector
        from evotrainer.lineage.tree import render_dot, render_tree, summaries

        if experiment is not None:
            check_name("experiment", experiment)
        Projector(self.store).catch_up()
        dag = LineageDAG.from_store(self.store, experiment)
        if experiment is not None and not dag.nodes:
            raise NotFoundError(f"no experiment {experiment}")
        names = {ref.partition("/")[0] for ref in dag.nodes}
        incumbents = {str(incumbent_of(self.store, name)) for name in names}
        info = summaries(self.store.conn, experiment, incumbents)
        rows = [LineageRow(s.ref, s.parent, s.fork_seq, s.head_seq, s.status, s.last_score, s.best_score)
                for s in (info[ref] for ref in dag.topological_order() if ref in info)]  # fmt: skip
        return Lineage(Table(LineageRow._fields, rows), dag, tuple(render_tree(dag, info)), render_dot(dag, info), info)

    def audit(
        self, ref: str | None = None, *, heads: Mapping[str, Mapping[str, Any]] | None = None,
        trust: Iterable[Path] | None = None, artifacts: bool = False, promotions: bool = False,
    ) -> Audit:
        """Verify the hash chains of EXPERIMENT/BRANCH and its ancestors (every branch when
        None) and every signed anchor of them. `heads` (an earlier audit's) also proves none
        was truncated; `artifacts` re-hashes every artifact the events reference;
        `promotions` adds the PromotionDecided events of the lineage."""
        from evotrainer.client.auditing import audit_record
        from evotrainer.store.audit import promotion_decisions

        branch = BranchRef.parse(ref, allow_seq=False) if ref else None
        report, signed = audit_record(self.store, branch, heads, trust, artifacts)
        decisions = tuple(promotion_decisions(self.store, branch)) if promotions else ()
        return Audit(report.intact, report.branches, report.events, tuple(report.problems),
                     report.heads, signed, decisions)  # fmt: skip

    def harness(self, ref: str) -> Harness:
        """The harness EXPERIMENT/BRANCH[@SEQ] runs under (the default spec when none is recorded)."""
        from evotrainer.harness.versions import branch_harness

        branch = BranchRef.parse(ref)
        current = branch_harness(self.store, branch)
        return Harness(str(branch), current.address, current.recorded_seq, current.spec.to_json())

    def harness_diff(self, a: str, b: str) -> HarnessDiff:
        """The fields whose values differ between two branches' harnesses (EXPERIMENT/BRANCH[@SEQ])."""
        from evotrainer.harness.spec import diff
        from evotrainer.harness.versions import branch_harness

        left = branch_harness(self.store, BranchRef.parse(a))
        right = branch_harness(self.store, BranchRef.parse(b))
        return HarnessDiff(left.address, right.address, tuple(diff(left.spec, right.spec)))

    def replay(self, ref: str) -> Replay:
        """Re-execute the branch's recorded train, evaluate, diagnose and backtest tasks and
        compare their outputs hash for hash, stopping at the first that differs. A task
        that cannot run here (an artifact this store lacks) raises CannotReplayError."""
        from evotrainer.fleet.replay import replay_branch
        from evotrainer.training.progress import quiet_libraries

        branch = BranchRef.parse(ref, allow_seq=False)
        self.store.branch(branch)
        quiet_libraries()
        rows = []
        for done in replay_branch(self.store, branch):
            r = done.request
            rows.append(ReplayedRow(f"{r.experiment}/{r.branch}@{r.seq}", done.kind, done.task_id,
                                    done.difference is None, done.difference, done.environment_changed))  # fmt: skip
            if done.difference is not None:
                break
        return Replay(str(branch), Table(ReplayedRow._fields, rows))

    def skills(self, domain: str | None = None) -> Table[SkillRow]:
        """The skill library (every experiment's SkillRecorded and SkillImported), or only the
        skills tried in `domain`'s family; best record first."""
        from evotrainer.evolve.skills import skill_library

        family = domain.split(":", 1)[0] if domain else None
        library = skill_library(self.store).skills.values()
        rows = [SkillRow(s.skill_id, s.trigger, s.field_path, s.way, s.category, s.successes, s.failures,
                         s.mean_effect, sorted(s.validated_in), sorted(s.tried_in), s.general, len(s.imported_from))
                for s in library if family is None or family in s.tried_in]  # fmt: skip
        rows.sort(key=lambda r: (not r.general, r.failures - r.successes, r.skill_id))
        return Table(SkillRow._fields, rows)

    def skill(self, skill_id: str) -> dict[str, Any]:
        """One skill in METHOD.md's format (trigger, intervention, expected outcome, counts,
        effect sizes, domains), with the change that validated it and where it came from."""
        from evotrainer.evolve.skill_files import skill_entry
        from evotrainer.evolve.skills import skill_library

        found = skill_library(self.store).skills.get(skill_id)
        if found is None:
            raise NotFoundError(f"no skill {skill_id} (see `evotrainer skills list`)")
        return skill_entry(self.store, found)

    def export_skills(self, domain: str | None = None, format: str = "json") -> str:
        """The library as a skills file: `json` (what `import_skills` reads) or `md` (for people)."""
        import json

        from evotrainer.evolve.skill_files import export_document, render_markdown
        from evotrainer.evolve.skills import skill_library

        if format not in ("json", "md"):
            raise UsageError(f"no skills file format {format!r}: json or md")
        document = export_document(self.store, skill_library(self.store), domain)
        return json.dumps(document, indent=2) + "\n" if format == "json" else render_markdown(document)

    def pending(self, experiment: str | None = None) -> Table[PendingRow]:
        """The requests the loop waits on at its human gates, oldest first: every
        experiment's, or only EXPERIMENT's (`evotrainer pending`)."""
        from evotrainer.evolve.gates import pending

        if experiment is not None:
            check_name("experiment", experiment)
            if not self.store.branches(experiment):
                raise NotFoundError(f"no experiment {experiment}")
        return Table(PendingRow._fields, [_pending_row(e) for e in pending(self.store, experiment)])

    # -- writing --------------------------------------------------------------------

    def create_experiment(
        self, name: str, *, description: str = "", domain: str | None = None, config: Mapping[str, Any] | None = None
    ) -> Branch:
        """Create NAME/main, whose first event is ExperimentCreated."""
        payload: dict[str, Any] = {"description": description}
        if domain is not None:
            payload["domain"] = domain
        if config is not None:
            payload["config"] = dict(config)
        self.store.create_experiment(name, payload)
        return self.branch(f"{name}/main")

    def append(
        self, ref: str, event_type: str, payload: Mapping[str, Any], *, expected_seq: int | None = None,
        idempotency_key: str | None = None, causation_id: str | None = None, correlation_id: str | None = None,
    ) -> StoredEvent:
        """Validate and append one event to EXPERIMENT/BRANCH; returns it as stored."""
        branch = BranchRef.parse(ref, allow_seq=False)
        if not isinstance(payload, Mapping):
            raise UsageError("the payload must be a JSON object")
        event = NewEvent(event_type, dict(payload), idempotency_key, causation_id, correlation_id)
        return self.store.append(branch, [event], expected_seq=expected_seq)[0]

    def fork(self, source: str, new_branch: str, reason: str = "", *, intervention: str | None = None) -> Branch:
        """Start NEW_BRANCH sharing SOURCE's history up to its @SEQ (its head without one);
        with `intervention` (proposed on SOURCE), under that intervention's harness."""
        ref = BranchRef.parse(source)
        if intervention is None:
            forked = self.store.fork(ref, new_branch, reason)
        else:
            if reason:
                raise UsageError("--reason and --intervention do not go together: the intervention is the reason")
            from evotrainer.evolve import fork_for_intervention

            forked = fork_for_intervention(self.store, ref, new_branch, intervention).forked
        return self.branch(f"{forked.experiment}/{forked.branch}")

    def diagnose(self, ref: str, evidence: str | None = None, *, record: bool = True) -> Diagnosis:
        """Three-layer diagnosis of the branch's latest rollout evidence (or `evidence`, a
        sha256 or prefix) under its harness; recorded as DiagnosisRecorded unless not `record`."""
        from evotrainer.diagnostics.task import run_diagnosis

        branch = BranchRef.parse(ref, allow_seq=False)
        run = run_diagnosis(self.store, branch, evidence)
        seq = self.store.append(branch, run.events())[-1].seq if record else None
        d = run.diagnosis
        findings = [FindingRow(f.layer, f.metric, f.value, f.severity, f.message) for f in d.findings]
        return Diagnosis(str(branch), run.harness.address, run.evidence, run.rollouts,
                         Table(FindingRow._fields, findings),
                         tuple(f"{c.name}: {c.because} -> {c.suggestion}" for c in d.conditions),
                         d.blocking, seq, d.to_json())  # fmt: skip

    def propose(
        self, ref: str, changes: Mapping[str, Any], hypothesis: str, *, criterion: str | None = None,
        rollback: str | None = None, frozen: Sequence[str] | None = None, intervention_id: str | None = None,
        proposer: str = "human",
    ) -> Proposal:
        """Record a single-factor intervention on the branch's harness (InterventionProposed):
        `changes` is {FIELD: VALUE} with exactly one field, as `propose --set FIELD=VALUE`;
        `proposer` is recorded with it (an agent over MCP: mcp:<client name>)."""
        from evotrainer.harness.intervention import design_intervention
        from evotrainer.harness.versions import branch_harness

        branch = BranchRef.parse(ref, allow_seq=False)
        current = branch_harness(self.store, branch)
        designed = design_intervention(current.spec, dict(changes), hypothesis=hypothesis,
                                       success_criterion=criterion, rollback_plan=rollback,
                                       frozen_fields=list(frozen) if frozen else None, proposer=proposer,
                                       intervention_id=intervention_id)  # fmt: skip
        events = current.unrecorded_default()
        e = designed.event
        events.append(NewEvent.of(e, idempotency_key=f"intervention:{e.intervention_id}"))
        seq = self.store.append(branch, events)[-1].seq
        return Proposal(e.intervention_id, e.field, e.old_value, e.new_value, e.hypothesis, e.success_criterion,
                        designed.candidate.address(), seq, proposer)  # fmt: skip

    def backtest(
        self, ref: str, intervention_id: str, evidence: str | None = None, *, domain: str | None = None,
        train_tasks: int = 64, record: bool = True,
    ) -> Backtest:
        """Replay an intervention proposed on the branch over its stored rollout evidence (or
        `evidence`) and judge it against its criterion; recorded as BacktestCompleted unless
        not `record`. `domain` scores components the evidence lacks."""
        from evotrainer.backtest.task import domain_scorer, run_intervention_backtest

        branch = BranchRef.parse(ref, allow_seq=False)
        scorer = domain_scorer(domain, train_tasks, 0) if domain else None
        run = run_intervention_backtest(self.store, branch, intervention_id, evidence, score_missing=scorer)
        seq = self.store.append(branch, run.events())[-1].seq if record else None
        v = run.verdict
        return Backtest(run.intervention.intervention_id, run.kind, run.evidence, dict(run.figures),
                        run.intervention.success_criterion, v.passed, tuple(v.held), tuple(v.failed),
                        tuple(v.unchecked), seq)  # fmt: skip

    def train(
        self, ref: str, *, domain: str | None = None, policy: str = "latest", steps: int | None = None,
        seed: int | None = None, learning_rate: float | None = None, group_size: int | None = None,
        prompts_per_step: int | None = None,
    ) -> TaskOutcome:
        """Request a GRPO run of the branch's policy under its harness (a `train` task) and,
        without a broker, run it here; the keywords override single settings for this run."""
        from evotrainer.client.work import training_inputs

        given = {"max_steps": steps, "seed": seed, "learning_rate": learning_rate,
                 "num_generations": group_size, "prompts_per_step": prompts_per_step}  # fmt: skip
        return self._work(ref, "train", training_inputs(policy, given), domain)

    def evaluate(
        self, ref: str, *, domain: str | None = None, policy: str = "latest", k: int | None = None,
        tasks: int | None = None, temperature: float | None = None, seed: int | None = None,
    ) -> TaskOutcome:
        """Request Avg@k of the branch's newest policy on the held-out split (an `evaluate`
        task) under its harness's evaluation protocol and, without a broker, run it here."""
        from evotrainer.client.work import evaluation_inputs

        given = {"k": k, "eval_tasks": tasks, "temperature": temperature, "seed": seed}
        return self._work(ref, "evaluate", evaluation_inputs(policy, given), domain)

    def import_skills(self, path: str | Path, into: str) -> Table[StoredEvent]:
        """Record every skill of a JSON skills file on INTO/main as SkillImported (with the
        file and where it was exported from), all or none: a file that does not validate is
        a UsageError and nothing is written. Importing the same file again is a no-op."""
        from evotrainer.evolve.skill_files import import_skills

        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else exc.reason
            raise UsageError(f"cannot read {path}: {why}") from None
        return Table(EVENT_COLUMNS, import_skills(self.store, into, text, str(path)))

    def propose_from_skills(self, ref: str, domain: str | None = None) -> list[Proposal]:
        """Let every validated skill whose trigger fires on the branch's last diagnosis
        propose its own change (InterventionProposed with proposer skill:ID); [] when none fires."""
        from evotrainer.client.work import experiment_domain
        from evotrainer.evolve.skill_proposals import propose_from_skills
        from evotrainer.evolve.skills import skill_library
        from evotrainer.harness.versions import branch_harness

        branch = BranchRef.parse(ref, allow_seq=False)
        self.store.branch(branch)
        stored = propose_from_skills(self.store, branch, domain or experiment_domain(self.store, branch),
                                     skill_library(self.store))  # fmt: skip
        spec = branch_harness(self.store, branch).spec
        out = []
        for e in stored:
            p = e.payload
            candidate = spec.with_field(p["field"], p["new_value"]).address()
            out.append(Proposal(p["intervention_id"], p["field"], p["old_value"], p["new_value"], p["hypothesis"],
                                p["success_criterion"], candidate, e.seq, p["proposer"]))  # fmt: skip
        return out

    def promote(self, ref: str, *, record: bool = True) -> Promotion:
        """Run the promotion gate on a candidate branch: promoted if it beats the best so far
        by the gate's margin with no blocking diagnostic. Recorded on EXPERIMENT/main as
        PromotionDecided (with its SkillRecorded) unless not `record`."""
        from evotrainer.evolve import decide_promotion, record_promotion

        candidate = BranchRef.parse(ref, allow_seq=False)
        where = None
        if record:
            decision, stored = record_promotion(self.store, candidate)
            payload, where = stored.payload, f"{stored.experiment}/{stored.branch}@{stored.seq}"
        else:
            decision = decide_promotion(self.store, candidate)
            payload = decision.decided.model_dump(mode="json")
        skill = decision.skill.skill_id if decision.skill is not None else None
        return Promotion(payload["candidate"], payload["decision"] == "promoted", payload["reason"], where, skill,
                         payload)  # fmt: skip

    def approve(self, request_id: str, note: str | None = None, actor: str | None = None) -> GateDecision:
        """Approve what a gate's request puts forward (the proposal, the intervention or the
        promotion), recorded as DecisionRecorded by `actor` (default: this client's); running
        the experiment again resumes from it. A request answered already is a UsageError."""
        return self._decide(request_id, "approved", {}, note, actor)

    def revise(
        self, request_id: str, field_path: str, value: Any, note: str | None = None, actor: str | None = None
    ) -> GateDecision:
        """Answer a gate's request with one change of your own (FIELD_PATH = VALUE) to run
        instead, checked as `propose` checks one before anything is written; a promotion
        cannot be revised."""
        if not isinstance(field_path, str) or not field_path.strip():
            raise UsageError("revise needs the change to run instead: a field path and its value")
        return self._decide(request_id, "revised", {field_path.strip(): value}, note, actor)

    def abort(self, request_id: str, note: str | None = None, actor: str | None = None) -> GateDecision:
        """Decline what a gate's request puts forward: the change is not tried, the promotion
        not made (recorded as the gate's rejection, naming who vetoed it)."""
        return self._decide(request_id, "aborted", {}, note, actor)

    def run(
        self, config: str | Path | Mapping[str, Any] | ExperimentConfig, *, iterations: int | None = None,
        say: Callable[[str], None] | None = None,
    ) -> RunResult:
        """Run the evolve loop (or resume it from its log): `config` is a TOML file, a dict of
        its fields, or an ExperimentConfig. `say` receives the loop's progress lines."""
        from evotrainer.evolve.controller import run_experiment

        loaded = experiment_config(config)
        _quiet_when_local()
        if iterations is not None:
            if iterations < 1:
                raise UsageError("iterations must be at least 1")
            loaded = loaded.model_copy(update={"iterations": iterations})
        summary = run_experiment(self.store, loaded, say=say or (lambda line: None))
        return RunResult(str(summary.best), summary.best_score, summary.candidates, summary.promoted,
                         summary.steps_spent)  # fmt: skip

    def compare(
        self, config: str | Path | Mapping[str, Any] | ExperimentConfig, *, seeds: int = 3,
        budget_steps: int | None = None, say: Callable[[str], None] | None = None,
    ) -> Comparison:
        """The loop against the fixed recipe at equal GRPO steps for each seed, scored on the
        held-out test half (resumable); recorded as ComparisonRecorded."""
        from evotrainer.evolve.compare import compare

        loaded = experiment_config(config)
        _quiet_when_local()
        stored = compare(self.store, loaded, seeds, budget_steps, say=say or (lambda line: None))
        p = stored.payload
        rows = [(r["seed"], r["fixed"]["score"], r["loop"]["score"], r["gain"], r["loop"]["steps"],
                 r["loop"].get("trained_steps")) for r in p["seeds"]]  # fmt: skip
        low, high = p["interval"]
        columns = ("seed", "fixed", "loop", "gain", "loop_steps", "loop_policy_steps")
        return Comparison(p["gain"], (low, high), p["loop_mean"], p["fixed_mean"],
                          f"{stored.experiment}/{stored.branch}@{stored.seq}", Table(columns, rows), p)  # fmt: skip

    # -- helpers --------------------------------------------------------------------

    def _decide(
        self, ident: str, decision: Decision, changes: dict[str, Any], note: str | None, actor: str | None
    ) -> GateDecision:
        from evotrainer.evolve.gates import describe, find_request, record_decision

        if not isinstance(ident, str) or not ident.strip():
            raise UsageError("name the request: its id is in `evotrainer pending`")
        stored = record_decision(self.store, ident.strip(), decision, changes=changes, note=(note or "").strip(),
                                 actor=actor or None)  # fmt: skip
        asked, _ = find_request(self.store, stored.payload["request_id"])
        return GateDecision(stored.payload["request_id"], decision, dict(stored.payload["changes"]),
                            stored.payload["note"], stored.actor, f"{stored.experiment}/{stored.branch}@{stored.seq}",
                            describe(asked.payload))  # fmt: skip

    def _work(self, ref: str, kind: str, inputs: Inputs, domain: str | None) -> TaskOutcome:
        from evotrainer.client.work import request_work

        _quiet_when_local()
        run = request_work(self.store, BranchRef.parse(ref, allow_seq=False), kind, inputs, domain)
        return TaskOutcome(run.kind, run.task_id, run.branch, run.requested_seq, run.ran_here, run.failure,
                           Table(EVENT_COLUMNS, list(run.events)))  # fmt: skip

    def _branch_row(self, ref: BranchRef) -> BranchRow:
        info = self.store.branch(ref)
        head_seq, head_hash = self.store.head(ref)
        return BranchRow(str(ref), str(info.parent) if info.parent else None, info.fork_seq, head_seq, head_hash)

    def _events_of(self, target: str, event_type: str) -> list[StoredEvent]:
        """Events of one type in a branch's effective history (EXPERIMENT/BRANCH), or on
        every branch of an experiment (EXPERIMENT), each once, in the order recorded."""
        if "/" in target:
            return [e for e in self.store.read_branch(BranchRef.parse(target)) if e.type == event_type]
        from evotrainer.store import sql
        from evotrainer.store.records import row_to_event

        check_name("experiment", target)
        if not self.store.branches(target):
            raise NotFoundError(f"no experiment {target}")
        rows = self.store.conn.execute(
            sql.SELECT_EVENTS + " WHERE b.experiment = %s AND e.type = %s ORDER BY e.transaction_id, e.position",
            (target, event_type),
        ).fetchall()
        return [row_to_event(row) for row in rows]


def _pending_row(asked: StoredEvent) -> PendingRow:
    from evotrainer.evolve.gates import describe

    p = asked.payload
    return PendingRow(p["request_id"], asked.experiment, p["subject"], p["branch"], p["why"], describe(p),
                      p.get("proposal"), p.get("details") or {}, asked.recorded_at)  # fmt: skip


def _quiet_when_local() -> None:
    """Without a broker the tasks run in this process, as under the CLI: their libraries'
    progress bars and warnings go to the log (EVOTRAINER_HOME/logs), not into a notebook."""
    from evotrainer import config as settings

    if not settings.broker_url():
        from evotrainer.training.progress import quiet_libraries

        quiet_libraries()


def experiment_config(config: str | Path | Mapping[str, Any] | ExperimentConfig) -> ExperimentConfig:
    """An ExperimentConfig from a TOML file's path, a dict of its fields, or itself."""
    from evotrainer.evolve.experiment_config import ExperimentConfig

    if isinstance(config, ExperimentConfig):
        return config
    if isinstance(config, str | Path):
        return ExperimentConfig.load(config)
    if isinstance(config, Mapping):
        return ExperimentConfig.parse(dict(config))
    raise UsageError(f"an experiment config is a TOML path, a dict or an ExperimentConfig, not {type(config).__name__}")
