"""`evotrainer audit`: prove the record was not altered, or name the first bad event."""

from __future__ import annotations

from pathlib import Path

import orjson
import typer

from evotrainer.cli.render import print_json
from evotrainer.errors import UsageError
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore


def audit_command(
    ref: str = typer.Argument(None, help="EXPERIMENT/BRANCH (with its ancestors); every branch when omitted."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    anchors: Path = typer.Option(
        None, help="JSON of branch heads from an earlier `audit --json`: also prove none was truncated."
    ),
    artifacts: bool = typer.Option(False, "--artifacts", help="Also re-hash every artifact the events reference."),
) -> None:
    """Verify hash chains. Exit 0 intact, 1 altered (first bad event named), 2 usage error."""
    from evotrainer.store.audit import audit, verify_anchors

    branch = BranchRef.parse(ref, allow_seq=False) if ref else None
    anchored = _read_anchors(anchors) if anchors else None
    with EventStore.connect() as store:
        report = audit(store, branch)
        if anchored is not None:
            report.problems.extend(verify_anchors(store, anchored))
        if artifacts:
            report.problems.extend(_audit_artifacts(store, branch))
    if as_json:
        print_json(report.to_json())
    elif report.intact:
        typer.echo(f"intact: {report.branches} branches, {report.events} events verified")
    else:
        typer.echo(f"ALTERED: first bad event {report.problems[0]}")
        for problem in report.problems[1:]:
            typer.echo(f"  also {problem}")
    if not report.intact:
        raise typer.Exit(1)


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
