"""Domains whose episodes a trainer plays turn by turn (multi-turn GRPO, training/multiturn.py).

A single-turn domain scores one completion. A turn-based one hands out a session per
episode: the trainer samples the policy's next action up to `turn_end`, gives it to
`act`, ends the action's line if the policy did not, appends the text `act` returns (the
observation, formatted for the transcript) and samples again, until `done`; `finish`
grades the final state. Sessions hold the episode's
environment, so the trainer never needs to know what a tool is.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from evotrainer.domains.base import Episode, Task


class TurnSession(ABC):
    """One episode in progress."""

    @property
    @abstractmethod
    def done(self) -> bool:
        """The episode is over (the policy finished, or a limit was reached)."""

    @abstractmethod
    def act(self, text: str) -> str:
        """Run the policy's action `text`; the transcript text that follows the action's
        line (empty once the episode is done)."""

    @abstractmethod
    def finish(self) -> Episode:
        """Grade the final state: the episode with its rewards, tool calls and metrics."""


class TurnBased(ABC):
    """Mixed into a Domain whose episodes are played turn by turn."""

    turn_end: str = "\n"
    """A turn's action ends at the first token whose text holds this."""
    max_turn_tokens: int = 48
    """Tokens the policy may write in one turn."""

    @abstractmethod
    def open_episode(self, task: Task) -> TurnSession:
        """A fresh session on `task` (its prompt is the transcript's start)."""
