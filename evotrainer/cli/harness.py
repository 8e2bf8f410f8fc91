"""`evotrainer harness show|diff|record`, `evotrainer diagnose`, `propose` and `backtest`.

    evotrainer harness show demo/main
    evotrainer diagnose demo/main
    evotrainer propose demo/main --set rewards.weights.format=0.2 --hypothesis "..."
    evotrainer backtest demo/main iv-0123456789ab

Each prints a readable report, or JSON with --json. Bad input is one line and exit 2,
with nothing written.
"""

from __future__ import annotations

import json
from typing import Any

import typer

from evotrainer.cli.render import print_json, print_line, print_table
from evotrainer.errors import UsageError
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore

app = typer.Typer(help="Show, compare and record harness versions.", no_args_is_help=True)


def _short(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


@app.command("show")
def show_command(
    ref: str = typer.Argument(..., help="EXPERIMENT/BRANCH[@SEQ]"),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """The harness a branch runs under (the default spec when none is recorded)."""
    from evotrainer.harness.spec import leaves
    from evotrainer.harness.versions import branch_harness

    with EventStore.connect() as store:
        current = branch_harness(store, BranchRef.parse(ref))
    origin = f"seq {current.recorded_seq}" if current.recorded_seq else "default, not recorded"
    if as_json:
        print_json({"harness_hash": current.address, "recorded_seq": current.recorded_seq,
                    "spec": current.spec.to_json()})  # fmt: skip
        return
    print_line(f"harness {current.address} ({origin})")
    print_table(["field", "value"], [(p, _short(v)) for p, v in leaves(current.spec.to_json())])


@app.command("diff")
def diff_command(
    a: str = typer.Argument(..., help="EXPERIMENT/BRANCH[@SEQ]"),
    b: str = typer.Argument(..., help="EXPERIMENT/BRANCH[@SEQ]"),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Fields whose values differ between two branches' harnesses."""
    from evotrainer.harness.spec import diff
    from evotrainer.harness.versions import branch_harness

    with EventStore.connect() as store:
        left, right = branch_harness(store, BranchRef.parse(a)), branch_harness(store, BranchRef.parse(b))
    changes = diff(left.spec, right.spec)
    if as_json:
        print_json({"a": left.address, "b": right.address,
                    "changes": [{"field": p, "a": x, "b": y} for p, x, y in changes]})  # fmt: skip
        return
    print_line(f"a {left.address}\nb {right.address}")
    if not changes:
        print_line("identical")
        return
    print_table(["field", "a", "b"], [(p, _short(x), _short(y)) for p, x, y in changes])


@app.command("record")
def record_command(
    ref: str = typer.Argument(..., help="EXPERIMENT/BRANCH"),
    spec: str = typer.Option(None, help="A spec as JSON or @FILE (default: the default spec)."),
    override: str = typer.Option(None, "--override", metavar="REASON", help=(
        "Record a diagnostic change that was not retro-validated, or a gate change; REASON is recorded.")),
) -> None:
    """Record a harness version on a branch (HarnessVersioned); a no-op if already recorded.
    A changed analyzer must have been retro-validated (an accepted DiagnosticRevised of
    its thresholds), and the gate changes only by a person: otherwise --override REASON."""
    from evotrainer.cli.payloads import parse_payload
    from evotrainer.harness.spec import HarnessSpec, diff
    from evotrainer.harness.versions import harness_of, unvalidated_changes, versioned_event

    branch = BranchRef.parse(ref, allow_seq=False)
    body = parse_payload(spec) if spec else {}
    if not isinstance(body, dict):
        raise UsageError("the spec must be a JSON object")
    new = HarnessSpec.parse(body)
    if override is not None and not override.strip():
        raise UsageError("--override needs a reason")
    with EventStore.connect() as store:
        history = store.read_branch(branch)
        current = harness_of(history)
        if current.recorded_seq is not None and new.address() == current.address:
            raise UsageError(f"{branch} already runs under harness {current.address[:12]}")
        parent = current.address if current.recorded_seq is not None else None
        changed = [p for p, _, _ in diff(current.spec, new)] if parent else []
        unvalidated = unvalidated_changes(history, current.spec, new) if parent else []
        if unvalidated and override is None:
            raise UsageError(f"{', '.join(unvalidated)} changed without retro-validation: revise the analyzer "
                             "over labelled runs first, or record it with --override REASON")  # fmt: skip
        stored = store.append(branch, [versioned_event(new, parent, changed, override if unvalidated else None)])[0]
    print_line(f"harness {new.address()} recorded at seq {stored.seq}"
               + (f" (override: {override})" if unvalidated else ""))


def diagnose_command(
    ref: str = typer.Argument(..., help="EXPERIMENT/BRANCH"),
    evidence: str = typer.Option(None, help="Evidence sha256 (or prefix) on the branch; default: the latest."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    record: bool = typer.Option(True, help="Append DiagnosisRecorded (--no-record: print only)."),
) -> None:
    """Three-layer diagnosis of a branch's latest rollout evidence under its harness."""
    from evotrainer.diagnostics.task import run_diagnosis

    branch = BranchRef.parse(ref, allow_seq=False)
    with EventStore.connect() as store:
        run = run_diagnosis(store, branch, evidence)
        seq = store.append(branch, run.events())[-1].seq if record else None
    d = run.diagnosis
    if as_json:
        print_json({"branch": str(branch), "harness_hash": run.harness.address, "evidence": run.evidence,
                    "rollouts": run.rollouts, "recorded_seq": seq, **d.to_json()})  # fmt: skip
        return
    print_line(f"diagnosis of {branch}: {run.rollouts} rollouts, evidence {run.evidence[:12]}, "
         f"harness {run.harness.address[:12]}")  # fmt: skip
    rows = [(f.layer, f.metric, "-" if f.value is None else f"{f.value:.4g}", f.severity, f.message)
            for f in d.findings]  # fmt: skip
    print_table(["layer", "metric", "value", "severity", "evidence"], rows)
    for f in d.findings:
        if f.severity != "info" and f.rollouts:
            print_line(f"  {f.metric}: rollouts {', '.join(map(str, f.rollouts[:10]))}")
    for c in d.conditions:
        print_line(f"condition {c.name}: {c.because} -> {c.suggestion}")
    if not d.conditions:
        print_line("no condition diagnosed")
    print_line("blocking: " + ("; ".join(d.blocking_reasons) if d.blocking else "no"))
    if seq is not None:
        print_line(f"recorded DiagnosisRecorded at seq {seq}")


def _parse_set(items: list[str]) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    for item in items:
        field, sep, text = item.partition("=")
        if not sep or not field.strip():
            raise UsageError(f"--set {item!r}: write FIELD=VALUE, e.g. --set grpo.temperature=1.2")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text  # a bare word is a string (loss_type=dr_grpo)
        if field.strip() in changes:
            raise UsageError(f"--set {field.strip()} is given twice")
        changes[field.strip()] = value
    return changes


def propose_command(
    ref: str = typer.Argument(..., help="EXPERIMENT/BRANCH"),
    set_: list[str] = typer.Option([], "--set", help="FIELD=VALUE (exactly one; VALUE is JSON or a bare word)."),
    hypothesis: str = typer.Option(..., help="If X changes, Y improves because Z."),
    criterion: str = typer.Option(None, help="Success criterion: METRIC OP NUMBER [and ...]."),
    rollback: str = typer.Option(None, help="Rollback plan (default: revert the field)."),
    frozen: list[str] = typer.Option([], "--frozen", help="A field held fixed (default: every other field)."),
    intervention_id: str = typer.Option(None, "--id", help="Intervention id (default: derived from the change)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Propose a single-factor intervention on the branch's harness (InterventionProposed)."""
    from evotrainer.harness.intervention import design_intervention
    from evotrainer.harness.versions import branch_harness
    from evotrainer.store import NewEvent

    branch = BranchRef.parse(ref, allow_seq=False)
    changes = _parse_set(set_)
    with EventStore.connect() as store:
        current = branch_harness(store, branch)
        designed = design_intervention(current.spec, changes, hypothesis=hypothesis, success_criterion=criterion,
                                       rollback_plan=rollback, frozen_fields=frozen or None,
                                       proposer="human", intervention_id=intervention_id)  # fmt: skip
        events = current.unrecorded_default()
        ident = designed.event.intervention_id
        events.append(NewEvent.of(designed.event, idempotency_key=f"intervention:{ident}"))
        seq = store.append(branch, events)[-1].seq
    e = designed.event
    if as_json:
        print_json({**e.model_dump(mode="json"), "recorded_seq": seq, "candidate_hash": designed.candidate.address()})
        return
    print_line(f"intervention {e.intervention_id} recorded at seq {seq}")
    print_line(f"  change      {e.field}: {json.dumps(e.old_value)} -> {json.dumps(e.new_value)}")
    print_line(f"  hypothesis  {e.hypothesis}")
    print_line(f"  criterion   {e.success_criterion}")
    print_line(f"  rollback    {e.rollback_plan}")
    print_line(f"  frozen      {', '.join(e.frozen_fields)}")
    print_line(f"  harness     {(e.base_harness_hash or '')[:12]} -> {designed.candidate.address()[:12]}")


def backtest_command(
    ref: str = typer.Argument(..., help="EXPERIMENT/BRANCH"),
    intervention_id: str = typer.Argument(..., help="The intervention to backtest."),
    evidence: str = typer.Option(None, help="Evidence sha256 (or prefix) on the branch; default: the latest."),
    domain: str = typer.Option(None, help="Score components the evidence lacks with this domain."),
    train_tasks: int = typer.Option(64, help="With --domain: how many train tasks the run drew."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    record: bool = typer.Option(True, help="Append BacktestCompleted (--no-record: print only)."),
) -> None:
    """Replay an intervention on stored evidence and judge it against its criterion."""
    from evotrainer.backtest.task import domain_scorer, run_intervention_backtest

    branch = BranchRef.parse(ref, allow_seq=False)
    scorer = domain_scorer(domain, train_tasks, 0) if domain else None
    with EventStore.connect() as store:
        run = run_intervention_backtest(store, branch, intervention_id, evidence, score_missing=scorer)
        seq = store.append(branch, run.events())[-1].seq if record else None
    payload = run.event().model_dump(mode="json")
    rate = run.figures.get("rollouts", 0) / run.seconds if run.seconds > 0 else None
    if as_json:
        print_json({**payload, "recorded_seq": seq, "rollouts_per_second": rate})
        return
    p = run.intervention
    print_line(f"backtest of {p.intervention_id} ({p.field}: {json.dumps(p.old_value)} -> {json.dumps(p.new_value)}), "
         f"{run.kind} replay of evidence {run.evidence[:12]}")  # fmt: skip
    print_table(["figure", "value"], [(k, _short(v)) for k, v in run.figures.items()])
    v = run.verdict
    print_line(f"criterion: {p.success_criterion}")
    for label, clauses in (("held", v.held), ("failed", v.failed), ("not checkable here", v.unchecked)):
        if clauses:
            print_line(f"  {label}: {'; '.join(clauses)}")
    print_line("PASSED" if v.passed else "FAILED")
    if seq is not None:
        print_line(f"recorded BacktestCompleted at seq {seq}")
