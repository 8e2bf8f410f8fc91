"""`evotrainer audit`: prove the record was not altered, or name the first bad event."""

from __future__ import annotations

from pathlib import Path

import orjson
import typer

from evotrainer.cli.render import print_json
from evotrainer.errors import UsageError
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, StoredEvent


def audit_command(
    ref: str = typer.Argument(None, help="EXPERIMENT/BRANCH (with its ancestors); every branch when omitted."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    anchors: Path = typer.Option(
        None, help="JSON of branch heads from an earlier `audit --json`: also prove none was truncated."
    ),
    artifacts: bool = typer.Option(False, "--artifacts", help="Also re-hash every artifact the events reference."),
    promotions: bool = typer.Option(
        False, "--promotions", help="Also list the evidence behind each promotion decision (of REF's lineage), "
        "and mark a decision the gate did not record or whose evidence is not in the record as results of work."
    ),
    trust: Path = typer.Option(
        None, "--trust", help="A file of public keys (hex, one a line) whose signed anchors to accept, besides "
        "this machine's own key (`evotrainer anchor --public-key` prints it)."
    ),
) -> None:
    """Verify hash chains and every signed anchor (`evotrainer anchor`). Exit 0 intact, 1
    altered (first bad event named) or, with --promotions, a decision not the gate's; 2 usage error."""
    from evotrainer.store.anchors import stored_anchors, trusted_keys, verify_signed_anchors
    from evotrainer.store.audit import audit, verify_anchors

    branch = BranchRef.parse(ref, allow_seq=False) if ref else None
    anchored = _read_anchors(anchors) if anchors else None
    trusted = trusted_keys([trust] if trust else None)
    with EventStore.connect() as store:
        report = audit(store, branch)
        if anchored is not None:
            report.problems.extend(verify_anchors(store, anchored))
        signed = [a for a in stored_anchors(store, branch.experiment if branch else None) if a.branch in report.heads]
        report.problems.extend(verify_signed_anchors(store, signed, trusted))
        if artifacts:
            report.problems.extend(_audit_artifacts(store, branch))
        decisions = _decisions(store, branch) if promotions else []
    forged = {e.event_id: why for e, why in decisions if why is not None}
    if as_json:
        shown = [{**e.to_json(), "not_the_gates": why} for e, why in decisions]
        print_json({**report.to_json(), "signed_anchors": len(signed),
                    **({"promotions": shown} if promotions else {})})  # fmt: skip
    elif report.intact:
        held = f", {len(signed)} signed anchors hold" if signed else ""
        typer.echo(f"intact: {report.branches} branches, {report.events} events verified{held}")
    else:
        typer.echo(f"ALTERED: first bad event {report.problems[0]}")
        for problem in report.problems[1:]:
            typer.echo(f"  also {problem}")
    if promotions and not as_json:
        _print_decisions(decisions)
        if forged:
            typer.echo(f"NOT THE GATE'S: {len(forged)} promotion decisions the gate did not record or cannot vouch for")
    if not report.intact or forged:
        raise typer.Exit(1)


def _decisions(store: EventStore, branch: BranchRef | None) -> list[tuple[StoredEvent, str | None]]:
    """PromotionDecided events (recorded on each experiment's main), oldest first, each with
    why it is not the gate's verdict (None: it is; evolve.promotion.judged_by_the_gate); with
    a branch, those whose candidate is the branch or one of its ancestors."""
    from evotrainer.evolve.promotion import judged_by_the_gate

    experiments = [branch.experiment] if branch else sorted({info.experiment for info in store.branches()})
    lineage = {f"{e.experiment}/{e.branch}" for e in store.read_branch(branch)} if branch else None
    found = []
    for experiment in experiments:
        for event, why in judged_by_the_gate(store, store.read_branch(BranchRef(experiment, "main"))):
            if lineage is None or event.payload["candidate"] in lineage:
                found.append((event, why))
    return found


def _print_decisions(decisions: list[tuple[StoredEvent, str | None]]) -> None:
    if not decisions:
        typer.echo("no promotion decision in this lineage")
    for event, why in decisions:
        p = event.payload
        evidence = p.get("evidence", {})
        said = p.get("reason") or f"{p['decision']} {p['candidate']}"
        typer.echo(f"{event.experiment}/{event.branch}@{event.seq}: {said}")
        for role in ("candidate_evaluation", "baseline_evaluation"):
            if role in evidence:
                e = evidence[role]
                typer.echo(f"  {role.replace('_', ' ')}: {e['branch']} policy {e['policy_sha256'][:12]} "
                           f"results {e['results_sha256'][:12]} (event {e['event_id']})")  # fmt: skip
        if "diagnosis" in evidence:
            typer.echo(f"  diagnosis: event {evidence['diagnosis']['event_id']} of evidence "
                       f"{evidence['diagnosis']['evidence'][:12]}")  # fmt: skip
        if "gate" in evidence:
            g = evidence["gate"]
            conditions = ", ".join(g["blocking_conditions"]) or "no condition"
            typer.echo(f"  gate: harness {g['harness_hash'][:12]}, min_margin {g['min_margin']}, blocking at "
                       f"{g['blocking_severity']} or {conditions}")  # fmt: skip
        if evidence.get("criterion"):
            c = evidence["criterion"]
            typer.echo(f"  criterion {c['text']}: {c['outcome']}")
        if why is not None:
            typer.echo(f"  NOT THE GATE'S: {why}")


def _audit_artifacts(store, branch: BranchRef | None) -> list:  # type: ignore[no-untyped-def,type-arg]
    """Missing or corrupted artifacts, each named by the first event that references it."""
    from evotrainer.artifacts import open_store as open_artifacts
    from evotrainer.artifacts.references import referenced_artifacts
    from evotrainer.store.audit import AuditProblem

    events = store.read_branch(branch) if branch else store.read_all(limit=10**9)
    references = referenced_artifacts(events)
    verdicts = open_artifacts().audit(sorted(references))
    problems = []
    for sha, verdict in sorted(verdicts.items()):
        if verdict != "ok":
            where, _, field = references[sha][0].partition(" ")
            exp_branch, _, seq = where.rpartition("@")
            problems.append(AuditProblem(exp_branch, int(seq), f"artifact {sha[:12]} ({field}) is {verdict}"))
    return problems


def _read_anchors(path: Path) -> dict[str, dict[str, object]]:
    try:
        data = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    except orjson.JSONDecodeError:
        raise UsageError(f"{path} is not JSON") from None
    heads = data.get("heads", data) if isinstance(data, dict) else None
    well_formed = isinstance(heads, dict) and all(
        isinstance(v, dict) and "seq" in v and "hash" in v for v in heads.values()
    )
    if not well_formed:
        raise UsageError(f"{path} holds no branch heads (expected the output of `audit --json`)")
    return heads  # type: ignore[return-value]


def anchor_command(
    experiment: str = typer.Argument(None, help="Experiment whose branch heads to sign; every one when omitted."),
    out: Path = typer.Option(None, "--out", help="Also write the signed anchors to this JSON file."),
    public_key: bool = typer.Option(False, "--public-key", help="Only print this machine's public key (hex)."),
) -> None:
    """Sign every branch head with this machine's anchor key (EVOTRAINER_HOME/anchor-key.pem,
    or EVOTRAINER_ANCHOR_KEY; created on first use) and store the anchors, after checking
    that the record audits intact. `audit` then verifies them: a superuser who edits an
    event and re-hashes the rest of its branch is caught at the first anchor after it."""
    from evotrainer.store.anchors import anchor_experiment, public_hex, signing_key

    if public_key:
        typer.echo(public_hex(signing_key()))
        return
    with EventStore.connect() as store:
        signed = anchor_experiment(store, experiment)
    if out is not None:
        try:
            out.write_bytes(orjson.dumps([a.to_json() for a in signed], option=orjson.OPT_INDENT_2))
        except OSError as exc:
            raise UsageError(f"cannot write {out}: {exc.strerror}") from None
    typer.echo(f"signed {len(signed)} branch heads with key {signed[0].public_key[:16]}" if signed
               else "nothing to sign")  # fmt: skip
