"""Branch references: EXPERIMENT/BRANCH, and EXPERIMENT/BRANCH@SEQ for a point in history."""

from __future__ import annotations

import re
from dataclasses import dataclass

from evotrainer.errors import UsageError

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_REF_PATTERN = re.compile(r"^(?P<experiment>[^/@]+)/(?P<branch>[^/@]+)(?:@(?P<seq>-?\d+))?$")


def check_name(kind: str, name: str) -> str:
    """Names are 1-100 characters of letters, digits, '.', '_' and '-', starting alphanumeric."""
    if not NAME_PATTERN.match(name):
        raise UsageError(
            f"bad {kind} name {name!r}: use 1-100 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return name


@dataclass(frozen=True, order=True)
class BranchRef:
    experiment: str
    branch: str
    seq: int | None = None

    @classmethod
    def parse(cls, text: str, *, allow_seq: bool = True, require_seq: bool = False) -> BranchRef:
        match = _REF_PATTERN.match(text.strip())
        if not match:
            raise UsageError(f"bad ref {text!r}: expected EXPERIMENT/BRANCH" + ("[@SEQ]" if allow_seq else ""))
        seq_text = match["seq"]
        if seq_text is not None and not allow_seq:
            raise UsageError(f"bad ref {text!r}: a branch is expected here, without @SEQ")
        if seq_text is None and require_seq:
            raise UsageError(f"bad ref {text!r}: expected EXPERIMENT/BRANCH@SEQ")
        seq = int(seq_text) if seq_text is not None else None
        if seq is not None and seq < 1:
            raise UsageError(f"bad ref {text!r}: SEQ counts from 1")
        return cls(check_name("experiment", match["experiment"]), check_name("branch", match["branch"]), seq)

    @property
    def branch_ref(self) -> BranchRef:
        return BranchRef(self.experiment, self.branch)

    def __str__(self) -> str:
        base = f"{self.experiment}/{self.branch}"
        return base if self.seq is None else f"{base}@{self.seq}"
