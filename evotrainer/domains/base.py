"""The contract every task domain keeps: tasks, prompts, rewards, episodes, behaviour metrics.

Domains know nothing of the database, the event store or training: they turn a seed into
tasks and a completion (or a multi-turn episode) into separately reported reward
components. Training, diagnostics and backtests consume them through this interface.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Split = Literal["train", "eval"]
MAX_GENERATED_INDEX = 100_000
"""`task_by_id` rebuilds generated tasks up to this index (the 100,000th task of a split)."""
_GENERATED_ID = re.compile(r"(?P<domain>[a-z]+)/(?P<split>train|eval)/(?P<seed>\d{1,9})/(?P<index>\d{1,6})")


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
    bait_components: tuple[str, ...] = ()
    """Components that can be earned without solving the task (a length bonus), kept so a
    harness can be tested against reward hacking (a canary) or weighted by a human who
    wants them. The rule proposer never adds weight to them."""

    @property
    def proposable_components(self) -> tuple[str, ...]:
        """The components the rule proposer may give weight to."""
        return tuple(c for c in self.reward_components if c not in self.bait_components)

    @abstractmethod
    def tasks(self, split: Split, n: int, seed: int) -> list[Task]:
        """The first `n` tasks of a deterministic split; train and eval never overlap."""

    @abstractmethod
    def score(self, task: Task, completion: str) -> dict[str, float]:
        """Reward components of a single-turn completion; never raises on arbitrary text."""

    def task_by_id(self, task_id: str) -> Task | None:
        """The task with this id, or None. A generated id names its split, seed and index
        (`math/train/0/12` is `tasks("train", 13, 0)[12]`), so it is rebuilt from them, up to
        index MAX_GENERATED_INDEX; domains with a fixed pool (files, HumanEval) override this
        to look the id up in the pool."""
        match = _GENERATED_ID.fullmatch(task_id)
        if match is None or match["domain"] != self.name or int(match["index"]) >= MAX_GENERATED_INDEX:
            return None
        index = int(match["index"])
        tasks = self.tasks(match["split"], index + 1, int(match["seed"]))  # type: ignore[arg-type]
        found = tasks[index] if len(tasks) > index else None
        return found if found is not None and found.task_id == task_id else None

    def score_with_details(self, task: Task, completion: str) -> tuple[dict[str, float], dict[str, Any]]:
        """`score`, and what the grade rests on beyond the reward components, from one grading
        (for `evotrainer domains score`). Detail keys by convention: `tests` (test id ->
        status such as "passed" or "failed") and `tampering` (the number of attempts to change
        test infrastructure); any other JSON-able key is printed too. No details by default."""
        return self.score(task, completion), {}

    def run_episode(self, task: Task, policy: Any, max_turns: int) -> Episode:
        """Multi-turn domains override this; single-turn ones score one completion."""
        completion = policy(task.prompt)
        return Episode(task_id=task.task_id, completion=completion, rewards=self.score(task, completion))

    def behaviour_metrics(self, episodes: Sequence[Episode]) -> dict[str, float]:
        """Domain-specific behaviour metrics over a set of episodes (for the diagnostics)."""
        return {}
