"""Single-factor interventions: one harness field changes, everything else is frozen.

`design_intervention` is the only way an InterventionProposed payload is built here: it
refuses a change that touches more than one field (naming them), a change that changes
nothing, an unknown field, a value the spec rejects, a frozen list that includes the
changed field, and a success criterion no machine can check.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evotrainer.errors import UsageError
from evotrainer.events import InterventionProposed
from evotrainer.harness.criterion import parse_criterion
from evotrainer.harness.spec import HarnessSpec, diff

REWARD_PREFIX = "rewards."
LENGTH_FIELDS = ("grpo.max_completion_length", "filters.mask_truncated_completions")
FILTER_FIELDS = ("filters.drop_zero_variance_groups", "filters.min_group_std")


class MultiFieldInterventionError(UsageError):
    """An intervention must change exactly one harness field."""

    def __init__(self, fields: Sequence[str]) -> None:
        super().__init__(
            f"an intervention changes exactly one harness field; this one changes {len(fields)}: "
            f"{', '.join(fields)}. Propose them as separate interventions"
        )
        self.fields = tuple(fields)


@dataclass(frozen=True)
class DesignedIntervention:
    """The proposal and the harness it would produce."""

    event: InterventionProposed
    base: HarnessSpec
    candidate: HarnessSpec


def default_criterion(field: str, value: Any = None) -> str:
    """A falsifiable criterion a backtest can check for the kinds of field it can replay.
    Taking a reward component's weight away (the repair for a gamed bonus) must stop paying
    some wrong completions; adding one must give dead groups a gradient; neither may make a
    wrong completion outrank a right one."""
    if field.startswith(REWARD_PREFIX) and value == 0:
        return "wrong_rewarded_removed >= 1 and ordering_violations_introduced == 0"
    if field.startswith(REWARD_PREFIX):
        return "dead_groups_rescued >= 1 and ordering_violations_introduced == 0"
    if field in LENGTH_FIELDS:
        return "correct_cut_fraction <= 0.05"
    if field in FILTER_FIELDS:
        return "effective_data_fraction >= 0.3"
    return "avg_at_k_gain >= 0.01"


def design_intervention(
    base: HarnessSpec,
    changes: Mapping[str, Any],
    *,
    hypothesis: str,
    success_criterion: str | None = None,
    rollback_plan: str | None = None,
    frozen_fields: Sequence[str] | None = None,
    proposer: str = "builtin",
    intervention_id: str | None = None,
) -> DesignedIntervention:
    """Validate a single-factor change of `base` and build its InterventionProposed."""
    if len(changes) != 1:
        if not changes:
            raise UsageError("an intervention must set one harness field (--set FIELD=VALUE)")
        raise MultiFieldInterventionError(sorted(changes))
    if not hypothesis.strip():
        raise UsageError("an intervention needs a hypothesis: 'if X changes, Y improves because Z'")
    (field, value), = changes.items()
    old = _value_or_none(base, field)
    candidate = base.with_field(field, value)
    changed = [path for path, _, _ in diff(base, candidate)]
    if not changed:
        raise UsageError(f"setting {field} to {json.dumps(value)} changes nothing: it is already that value")
    # A value that is itself a mapping could smuggle several leaves in under one path; an
    # empty mapping it replaces is a placeholder, not a field of its own.
    leaves = [p for p in changed if not (p == field and old == {})]
    if len(leaves) != 1:
        raise MultiFieldInterventionError(leaves)
    criterion = success_criterion or default_criterion(field, value)
    parse_criterion(criterion)
    frozen = list(frozen_fields) if frozen_fields else default_frozen(base, field)
    for path in frozen:
        if path == field or field.startswith(path + "."):
            raise UsageError(f"frozen field {path!r} contains the field this intervention changes ({field})")
        base.get_field(path)
    base_hash = base.address()
    undo = f"remove {field}" if old is None else f"revert {field} to {json.dumps(old)}"
    rollback = rollback_plan or f"{undo} (back to harness {base_hash[:12]})"
    ident = intervention_id or _intervention_id(base_hash, field, value)
    event = InterventionProposed(
        intervention_id=ident, field=field, old_value=old, new_value=candidate.get_field(field),
        hypothesis=hypothesis.strip(), frozen_fields=frozen, success_criterion=criterion,
        rollback_plan=rollback, proposer=proposer, base_harness_hash=base_hash,
    )  # fmt: skip
    return DesignedIntervention(event, base, candidate)


def default_frozen(base: HarnessSpec, field: str) -> list[str]:
    """Every other top-level section whole, and the changed field's siblings by name."""
    data = base.to_json()
    parts = field.split(".")
    frozen = [section for section in sorted(data) if section != parts[0]]
    node = data
    for i, part in enumerate(parts[:-1]):
        node = node[part]
        prefix = ".".join(parts[: i + 1])
        frozen.extend(f"{prefix}.{key}" for key in sorted(node) if key != parts[i + 1])
    return frozen


def _value_or_none(spec: HarnessSpec, field: str) -> Any:
    try:
        return spec.get_field(field)
    except UsageError:
        parent, _, _ = field.rpartition(".")
        if parent and isinstance(spec.get_field(parent), dict):
            return None  # a new key under a mapping (a new reward weight)
        raise


def _intervention_id(base_hash: str, field: str, value: Any) -> str:
    """Deterministic: the same proposal on the same base is the same intervention."""
    digest = hashlib.sha256(json.dumps([base_hash, field, value], sort_keys=True).encode()).hexdigest()
    return f"iv-{digest[:12]}"
