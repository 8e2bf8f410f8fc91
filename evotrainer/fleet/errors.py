"""Errors of the worker fleet, all EvotrainerError subclasses."""

from __future__ import annotations

from evotrainer.errors import EvotrainerError, UsageError


class TransientTaskError(EvotrainerError):
    """Worth retrying: the database connection was lost, the broker hiccuped. Task
    functions may raise it themselves for conditions they know to be temporary."""


class TaskInputError(UsageError):
    """A task's request cannot be run as given (unknown kind, inputs that do not fit the
    kind's input model). Deterministic: recorded once as TaskFailed, never retried."""


class BrokerUnavailableError(EvotrainerError):
    """The Celery broker cannot be reached."""
