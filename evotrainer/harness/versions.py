"""Harness versions in the event store: which spec a branch runs under, and recording one.

A branch's harness is the spec of its latest HarnessVersioned event (inherited ones
included); a branch that never recorded one runs under the default spec, and the callers
that write events record that default first so every later event points at a stored spec.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from evotrainer.errors import InvalidPayloadError
from evotrainer.events import HarnessVersioned
from evotrainer.harness.spec import HarnessSpec
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, NewEvent, StoredEvent


@dataclass(frozen=True)
class BranchHarness:
    """The spec a branch runs under and where it came from."""

    spec: HarnessSpec
    address: str
    recorded_seq: int | None
    """Seq of its HarnessVersioned event; None when the branch has none (the default)."""

    def unrecorded_default(self) -> list[NewEvent]:
        """What to append before events that point at this harness: the default spec, once."""
        return [] if self.recorded_seq is not None else [versioned_event(self.spec)]


def branch_harness(store: EventStore, ref: BranchRef) -> BranchHarness:
    """The latest recorded harness of a branch (up to ref.seq), else the default spec."""
    return harness_of(store.read_branch(ref))


def harness_of(history: Sequence[StoredEvent]) -> BranchHarness:
    """The harness of an already read branch history (its latest HarnessVersioned), else
    the default spec: for callers that read the history once for several things."""
    for event in reversed(history):
        if event.type == "HarnessVersioned":
            return BranchHarness(spec_of(event.payload), event.payload["harness_hash"], event.seq)
    spec = HarnessSpec()
    return BranchHarness(spec, spec.address(), None)


def spec_of(payload: dict) -> HarnessSpec:  # type: ignore[type-arg]
    """The spec of a HarnessVersioned payload, checked against its recorded address."""
    spec = HarnessSpec.parse(payload["spec"])
    if spec.address() != payload["harness_hash"]:
        raise InvalidPayloadError("HarnessVersioned", f"spec does not hash to {payload['harness_hash']}")
    return spec


def versioned_event(
    spec: HarnessSpec, parent: str | None = None, changed_fields: Sequence[str] = (), override: str | None = None,
    **metadata: str | None,
) -> NewEvent:
    """HarnessVersioned for `spec`, keyed by the transition (parent -> spec): recording the
    same step twice is a no-op, while going back to an earlier spec is a new version."""
    payload = HarnessVersioned(
        harness_hash=spec.address(), spec=spec.to_json(), parent_hash=parent, changed_fields=list(changed_fields),
        override=override,
    )
    return NewEvent.of(payload, idempotency_key=f"harness:{parent or 'root'}:{spec.address()}", **metadata)


def unvalidated_changes(history: Sequence[StoredEvent], current: HarnessSpec, new: HarnessSpec) -> list[str]:
    """What in `new` may not be recorded on its own word (METHOD.md: a diagnostic joins the
    harness only once it separates the runs that proved good from those that proved bad):
    each analyzer whose settings change without an accepted DiagnosticRevised of exactly
    those thresholds in the branch's history, and any change to the promotion gate (which
    judges every later candidate: a human's decision, recorded as an override)."""
    from evotrainer.harness.spec import diff

    changed = [path for path, _, _ in diff(current, new)]
    out = sorted({f"promotion.{p.split('.')[1]}" for p in changed if p.startswith("promotion.")})
    for name in sorted({p.split(".")[1] for p in changed if p.startswith("diagnostics.")}):
        settings = new.diagnostics.get(name)
        if settings is None or not settings.enabled:
            out.append(f"diagnostics.{name} (removed or disabled)")
            continue
        wanted = {k: v for k, v in (("warning", settings.warning), ("critical", settings.critical)) if v is not None}
        wanted.update(settings.params)
        if not any(e.type == "DiagnosticRevised" and e.payload.get("accepted") and e.payload["analyzer"] == name
                   and e.payload.get("thresholds") == wanted for e in history):  # fmt: skip
            out.append(f"diagnostics.{name}")
    return out
