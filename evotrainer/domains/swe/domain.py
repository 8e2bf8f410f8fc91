"""The swe domain: repository-level bug fixing as a multi-turn tool episode.

Tasks are generated repositories (repos.py) or SWE-bench instances with their
repositories on disk (instances.py). A policy is a callable from the transcript so far
to its next message (one JSON tool call). `score` grades a single completion: a unified
diff against the base (applied as the agent's edits would be, test-infrastructure
changes included, so grading's own defences are what is tested), or tool calls, which
it replays; `score_details` adds each graded test's status and the tampering count.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evotrainer.domains.base import Domain, Episode, Split, Task
from evotrainer.domains.splits import take_all, take_fixed, take_generated
from evotrainer.domains.swe.env import SweConfig, SweEnvironment, parse_action
from evotrainer.domains.swe.repos import SweProblem, generate_problem, load_swebench_jsonl
from evotrainer.errors import UsageError

_INSTRUCTIONS = (
    "You are fixing a bug in a Python repository. Each turn, reply with exactly one JSON object naming a tool:\n"
    '{"tool": "list_files", "path": DIR} | {"tool": "read_file", "path": P, "start": N, "end": M} | '
    '{"tool": "search", "text": T, "path": DIR} | {"tool": "edit", "path": P, "search": OLD, "replace": NEW} | '
    '{"tool": "run_tests"} | {"tool": "shell", "command": C} | {"tool": "submit"}\n'
    "read_file's start/end (1-based lines) and search's path are optional; edit's search must match exactly once "
    "(empty: create the file). shell runs on the same files that are graded. Tests, conftest.py and other test "
    "configuration are restored before grading; changing them counts as tampering.\n"
)
_MAX_LISTED = 200
_DIFF_START = re.compile(r"^(diff --git |--- \S)", re.MULTILINE)


@dataclass(frozen=True)
class SweDomainConfig:
    env: SweConfig = SweConfig()
    instances: Path | None = None
    """SWE-bench JSONL or a saved `datasets` directory; requires `repos`."""
    repos: Path | None = None
    """Holds `<instance_id>/` checkouts or `<instance_id>.bundle` git bundles."""
    whole_file: bool = False
    """Every split is the whole instance file, in file order (`split=all`)."""

    def __post_init__(self) -> None:
        if (self.instances is None) != (self.repos is None):
            raise UsageError("swe instances and repos must be given together (swe:file=PATH,repos=DIR)")


def _problem_of(task: Task) -> SweProblem:
    problem = task.metadata["problem"]
    assert isinstance(problem, SweProblem)
    return problem


class SweDomain(Domain):
    name = "swe"
    reward_components = ("correctness", "visible_tests", "format", "partial_tests")

    def __init__(self, config: SweDomainConfig | None = None) -> None:
        self.config = config or SweDomainConfig()
        self._pool: list[Task] | None = None
        if self.config.instances is not None and self.config.repos is not None:
            loaded = load_swebench_jsonl(self.config.instances, self.config.repos, self.config.env.pip_args)
            self._pool = [self._task(iid, problem, "file") for iid, problem in loaded]

    @staticmethod
    def _task(task_id: str, problem: SweProblem, level: str) -> Task:
        paths = sorted(problem.files)
        # A real repository has thousands of files: the prompt names the first ones only.
        listing = "\n".join(paths[:_MAX_LISTED])
        if len(paths) > _MAX_LISTED:
            listing += f"\n[... {len(paths) - _MAX_LISTED} more files: use list_files or search]"
        prompt = f"{_INSTRUCTIONS}\nIssue: {problem.issue}\n\nFiles:\n{listing}\n"
        return Task(task_id=task_id, domain="swe", prompt=prompt, reference=problem.reference, level=level,
                    metadata={"problem": problem, "bug_file": problem.bug_file})  # fmt: skip

    def tasks(self, split: Split, n: int, seed: int) -> list[Task]:
        if self._pool is not None and self.config.whole_file:
            return take_all(n, self._pool)
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

    def all_tasks(self) -> list[Task]:
        """Every task of the instance file, in file order (empty for generated problems)."""
        return list(self._pool or [])

    def score(self, task: Task, completion: str) -> dict[str, float]:
        return dict(self.replay(task, completion).rewards)

    def task_by_id(self, task_id: str) -> Task | None:
        if self._pool is not None:
            return next((t for t in self._pool if t.task_id == task_id), None)
        return super().task_by_id(task_id)

    def score_with_details(self, task: Task, completion: str) -> tuple[dict[str, float], dict[str, Any]]:
        """Rewards, and from the same grading each graded test's status (SWE-bench
        instances), the tampering count and the test-infrastructure files touched."""
        episode, env = self._replayed(task, completion)
        tampered = sorted({p for c in env.calls for p in c.tampered})
        details = {"tests": dict(env.test_statuses), "tampering": env.counts["tamper_attempts"],
                   "tampered_files": tampered}  # fmt: skip
        return dict(episode.rewards), details

    def score_details(self, task: Task, completion: str) -> dict[str, object]:
        """score_with_details as one mapping: {"rewards", "tests", "tampering", "tampered_files"}."""
        rewards, details = self.score_with_details(task, completion)
        return {"rewards": rewards, **details}

    def replay(self, task: Task, completion: str) -> Episode:
        """An episode from a unified diff, or from tool calls written one per line."""
        return self._replayed(task, completion)[0]

    def _replayed(self, task: Task, completion: str) -> tuple[Episode, SweEnvironment]:
        env = SweEnvironment(_problem_of(task), self.config.env)
        if _DIFF_START.search(completion) and parse_action(completion) is None:
            env.step_patch(0, completion)
        else:
            actions = [line for line in completion.splitlines() if parse_action(line) is not None] or [completion]
            for turn, action in enumerate(actions[: self.config.env.max_turns]):
                env.step(turn, action)
                if env.done:
                    break
        return self._episode(task, env, completion), env

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
