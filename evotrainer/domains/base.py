"""The contract every task domain keeps: tasks, prompts, rewards, episodes, behaviour metrics.

Domains know nothing of the database, the event store or training: they turn a seed into
tasks and a completion (or a multi-turn episode) into separately reported reward
components. Training, diagnostics and backtests consume them through this interface.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Split = Literal["train", "eval"]


@dataclass(frozen=True)
class Task:
    """One problem: a stable id, the prompt shown to the policy, and what grading needs."""

    task_id: str
    domain: str
    prompt: str
    reference: str = ""
    """The reference answer or solution (used for SFT warm starts, never shown in the prompt)."""
    level: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolCall:
    """One tool use inside a multi-turn episode, as the diagnostics see it."""

    turn: int
    tool: str
    arguments: Mapping[str, Any]
    ok: bool
    observation: str = ""
    changed: tuple[str, ...] = ()
    """Files of the working tree this call created, changed or deleted (an edit, a shell
    command, a patch)."""
    tampered: tuple[str, ...] = ()
    """Files this call tampered with or tried to (test files, test infrastructure, source
    reaching into the test runner), as the domain judged them: what the tampering
    diagnostics read besides edit paths."""


@dataclass(frozen=True)
class Episode:
    """What one rollout produced: the text, the reward components, and its tool trace."""

    task_id: str
    completion: str
    rewards: Mapping[str, float]
    """Each reward component reported separately; the harness decides how to weigh them."""
    tool_calls: Sequence[ToolCall] = ()
    metrics: Mapping[str, float] = field(default_factory=dict)
    """Behaviour metrics of this episode (turns, tampering attempts, ...)."""


class Domain(ABC):
    """A task domain. Implementations must be deterministic for a given seed."""

    name: str
    reward_components: tuple[str, ...]
    """Names of the components `score` reports, in a stable order."""
    correctness_component: str = "correctness"
    """The binary ground-truth component (what reward hacking is measured against)."""

    @abstractmethod
    def tasks(self, split: Split, n: int, seed: int) -> list[Task]:
        """The first `n` tasks of a deterministic split; train and eval never overlap."""

    @abstractmethod
    def score(self, task: Task, completion: str) -> dict[str, float]:
        """Reward components of a single-turn completion; never raises on arbitrary text."""

    def run_episode(self, task: Task, policy: Any, max_turns: int) -> Episode:
        """Multi-turn domains override this; single-turn ones score one completion."""
        completion = policy(task.prompt)
        return Episode(task_id=task.task_id, completion=completion, rewards=self.score(task, completion))

    def behaviour_metrics(self, episodes: Sequence[Episode]) -> dict[str, float]:
        """Domain-specific behaviour metrics over a set of episodes (for the diagnostics)."""
        return {}
