"""The error hierarchy evotrainer reports to users.

Library code raises these with the data a user needs; only the CLI edge turns them into
one line on stderr and an exit code (never a traceback).
"""

from __future__ import annotations


class EvotrainerError(Exception):
    """Base of every error evotrainer reports to users."""

    exit_code: int = 1


class UsageError(EvotrainerError):
    """The request itself is malformed (bad ref, bad name, bad JSON, unknown type)."""

    exit_code = 2


class NotFoundError(UsageError):
    """A named experiment, branch or event does not exist."""


class AlreadyExistsError(UsageError):
    """A name that must be new is taken."""


class InvalidPayloadError(UsageError):
    """An event payload does not satisfy its JSON Schema or cannot be stored faithfully."""

    def __init__(self, event_type: str, reason: str) -> None:
        super().__init__(f"invalid {event_type} payload: {reason}")
        self.event_type = event_type
        self.reason = reason


class ConcurrencyError(EvotrainerError):
    """Another writer appended to the branch first: the expected sequence is stale."""

    exit_code = 3

    def __init__(self, branch: str, expected_seq: int, actual_seq: int) -> None:
        super().__init__(
            f"branch {branch} is at seq {actual_seq}, not the expected {expected_seq}; "
            "re-read the branch and retry"
        )
        self.branch = branch
        self.expected_seq = expected_seq
        self.actual_seq = actual_seq


class BypassingWriterError(ConcurrencyError):
    """Inside a caller's transaction, a writer that does not take the store's branch lock
    took the seq or key this append needed; the caller's transaction is aborted."""

    def __init__(self, branch: str, constraint: str) -> None:
        EvotrainerError.__init__(
            self,
            f"another writer appended to {branch} without the store's branch lock (conflict on {constraint});"
            " the enclosing transaction is aborted: roll it back and retry",
        )
        self.branch = branch
        self.constraint = constraint


class DatabaseUnavailableError(EvotrainerError):
    """The event store cannot be reached or started."""


class ImmutableHistoryError(EvotrainerError):
    """Something tried to change or remove a recorded event."""
