"""`evotrainer audit`: prove the record was not altered, or name the first bad event."""

from __future__ import annotations

from pathlib import Path

import orjson
import typer

from evotrainer.cli.render import print_json
from evotrainer.errors import UsageError
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
    from evotrainer.client import connect
    from evotrainer.store.audit import describe_decision

    anchored = _read_anchors(anchors) if anchors else None
    with connect() as client:
        result = client.audit(ref, heads=anchored, trust=[trust] if trust else None, artifacts=artifacts,
                              promotions=promotions)  # fmt: skip
        forged = _not_the_gates(client.store, list(result.promotions))
    if as_json:
        shown = [{**e.to_json(), "not_the_gates": forged.get(e.event_id)} for e in result.promotions]
        print_json({**result.to_json(), **({"promotions": shown} if promotions else {})})  # fmt: skip
    elif result.intact:
        held = f", {result.signed_anchors} signed anchors hold" if result.signed_anchors else ""
        typer.echo(f"intact: {result.branches} branches, {result.events} events verified{held}")
    else:
        typer.echo(f"ALTERED: first bad event {result.problems[0]}")
        for problem in result.problems[1:]:
            typer.echo(f"  also {problem}")
    if promotions and not as_json:
        if not result.promotions:
            typer.echo("no promotion decision in this lineage")
        for event in result.promotions:
            for line in describe_decision(event):
                typer.echo(line)
            if event.event_id in forged:
                typer.echo(f"  NOT THE GATE'S: {forged[event.event_id]}")
        if forged:
            typer.echo(f"NOT THE GATE'S: {len(forged)} promotion decisions the gate did not record or cannot vouch for")
    if not result.intact or forged:
        raise typer.Exit(1)


def _not_the_gates(store: EventStore, decisions: list[StoredEvent]) -> dict[str, str]:
    """Why each decision is not the gate's verdict, by event id (evolve.promotion.judged_by_the_gate)."""
    if not decisions:
        return {}
    from evotrainer.evolve.promotion import judged_by_the_gate
    from evotrainer.refs import BranchRef

    wanted = {e.event_id for e in decisions}
    found = {}
    for experiment in sorted({e.experiment for e in decisions}):
        for event, why in judged_by_the_gate(store, store.read_branch(BranchRef(experiment, "main"))):
            if why is not None and event.event_id in wanted:
                found[event.event_id] = why
    return found


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
