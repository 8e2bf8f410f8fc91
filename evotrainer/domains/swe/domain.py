"""The swe domain: repository-level bug fixing as a multi-turn tool episode.

Tasks are generated repositories (repos.py) or SWE-bench-style instances over local
snapshots. A policy is a callable from the transcript so far to its next message (one
JSON tool call); `score` replays the tool calls found in a single completion, so
single-turn training and backtests can use the same grading.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from evotrainer.domains.base import Domain, Episode, Split, Task
from evotrainer.domains.splits import take_fixed, take_generated
from evotrainer.domains.swe.env import SweConfig, SweEnvironment, parse_action
from evotrainer.domains.swe.repos import SweProblem, generate_problem, load_swebench_jsonl
from evotrainer.errors import UsageError

_INSTRUCTIONS = (
    "You are fixing a bug in a Python repository. Each turn, reply with exactly one JSON object naming a tool:\n"
    '{"tool": "list_files"} | {"tool": "read_file", "path": P} | '
    '{"tool": "edit", "path": P, "search": OLD, "replace": NEW} | {"tool": "run_tests"} | '
    '{"tool": "shell", "command": C} | {"tool": "submit"}\n'
)


@dataclass(frozen=True)
class SweDomainConfig:
    env: SweConfig = SweConfig()
    instances: Path | None = None
    """SWE-bench-style JSONL; requires `snapshots`."""
    snapshots: Path | None = None

    def __post_init__(self) -> None:
        if (self.instances is None) != (self.snapshots is None):
            raise UsageError("swe instances and snapshots must be given together")


def _problem_of(task: Task) -> SweProblem:
    problem = task.metadata["problem"]
    assert isinstance(problem, SweProblem)
    return problem


class SweDomain(Domain):
    name = "swe"
    reward_components = ("correctness", "visible_tests", "format")

    def __init__(self, config: SweDomainConfig | None = None) -> None:
        self.config = config or SweDomainConfig()
        self._pool: list[Task] | None = None
        if self.config.instances is not None and self.config.snapshots is not None:
            loaded = load_swebench_jsonl(self.config.instances, self.config.snapshots)
            self._pool = [self._task(f"swe/{iid}", problem, "file") for iid, problem in loaded]

    @staticmethod
    def _task(task_id: str, problem: SweProblem, level: str) -> Task:
        listing = "\n".join(sorted(problem.files))
        prompt = f"{_INSTRUCTIONS}\nIssue: {problem.issue}\n\nFiles:\n{listing}\n"
        return Task(task_id=task_id, domain="swe", prompt=prompt, reference=problem.reference, level=level,
                    metadata={"problem": problem, "bug_file": problem.bug_file})  # fmt: skip

    def tasks(self, split: Split, n: int, seed: int) -> list[Task]:
        if self._pool is not None:
            return take_fixed(split, n, self._pool, key=lambda t: t.task_id, seed=seed)
        problems = take_generated(
            split, n, generate_problem, key=lambda p: json.dumps(p.files, sort_keys=True), seed=seed
        )
        return [self._task(f"swe/{split}/{seed}/{i}", p, "generated") for i, p in enumerate(problems)]

    def run_episode(self, task: Task, policy: Callable[[str], str], max_turns: int | None = None) -> Episode:
        env = SweEnvironment(_problem_of(task), self.config.env)
        limit = min(max_turns or self.config.env.max_turns, self.config.env.max_turns)
        transcript, messages = task.prompt, []
        for turn in range(limit):
            message = policy(transcript)
            messages.append(message)
            observation = env.step(turn, message)
            transcript += f"\n>>> {message}\n{observation}\n"
            if env.done:
                break
        return self._episode(task, env, "\n".join(messages))

    def score(self, task: Task, completion: str) -> dict[str, float]:
        return dict(self.replay(task, completion).rewards)

    def replay(self, task: Task, completion: str) -> Episode:
        """An episode from the tool calls written one per line (or one JSON object each)."""
        env = SweEnvironment(_problem_of(task), self.config.env)
        actions = [line for line in completion.splitlines() if parse_action(line) is not None] or [completion]
        for turn, action in enumerate(actions[: self.config.env.max_turns]):
            env.step(turn, action)
            if env.done:
                break
        return self._episode(task, env, completion)

    def _episode(self, task: Task, env: SweEnvironment, completion: str) -> Episode:
        calls = env.calls
        tools = [c.tool for c in calls]
        first_edit = next((c.turn for c in calls if c.tool == "edit"), -1)
        searched_first = any(t in ("read_file", "list_files", "shell") for t in tools[: max(first_edit, 0)])
        metrics: dict[str, float] = {
            "turns": float(len(calls)),
            "tool_failures": float(sum(not c.ok for c in calls)),
            "submitted": float(env.done),
            "self_tested": float(env.counts["test_runs"] > 0),
            "edited_bug_file": float(
                bool(task.metadata.get("bug_file")) and task.metadata["bug_file"] in env.edited_files
            ),
            "search_before_edit": float(first_edit >= 0 and searched_first),
            "first_edit_turn": float(first_edit),
            **{k: float(v) for k, v in env.counts.items()},
        }
        return Episode(task_id=task.task_id, completion=completion, rewards=env.grade(), tool_calls=tuple(calls),
                       metrics=metrics)  # fmt: skip

    def behaviour_metrics(self, episodes: Sequence[Episode]) -> dict[str, float]:
        if not episodes:
            return {}
        calls = [c for e in episodes for c in e.tool_calls]

        def mean(key: str) -> float:
            return statistics.fmean(e.metrics.get(key, 0.0) for e in episodes)

        edited = [frozenset(c.arguments.get("path", "") for c in e.tool_calls if c.tool == "edit") for e in episodes]
        pairs = [(a, b) for i, a in enumerate(edited) for b in edited[i + 1 :]]
        jaccard = [len(a & b) / len(a | b) if a | b else 1.0 for a, b in pairs]
        return {
            "solve_rate": statistics.fmean(e.rewards.get("correctness", 0.0) for e in episodes),
            "mean_turns": mean("turns"),
            "tool_failure_rate": sum(not c.ok for c in calls) / len(calls) if calls else 0.0,
            "self_test_rate": mean("self_tested"),
            "edit_coverage": mean("edited_bug_file"),
            "search_before_edit_rate": mean("search_before_edit"),
            "tamper_rate": statistics.fmean(float(e.metrics.get("tamper_attempts", 0) > 0) for e in episodes),
            "history_probe_rate": statistics.fmean(float(e.metrics.get("history_probes", 0) > 0) for e in episodes),
            "solution_diversity": 1 - statistics.fmean(jaccard) if jaccard else 0.0,
        }
