"""Scoring given completions with a domain's real reward (`evotrainer domains score`).

A completions file holds one JSON object per line, `{"task_id": ..., "completion": ...}`.
Every line is read and every task found before anything is scored, so a bad file is one
error naming file:line and no scores. The total is the reward training gives
(`GRPOSettings.total_reward` under the harness's weights).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evotrainer.domains.base import Domain, Task
from evotrainer.domains.files import json_lines
from evotrainer.errors import UsageError


@dataclass(frozen=True)
class Completion:
    task: Task
    completion: str


def read_completions(path: Path, domain: Domain) -> list[Completion]:
    """Each line's task (looked up in the domain) and completion; UsageError naming file:line."""
    out = []
    found: dict[str, Task] = {}
    for lineno, row in json_lines(path):
        if not isinstance(row, dict) or not isinstance(row.get("task_id"), str | int) or isinstance(
            row.get("task_id"), bool
        ):
            raise UsageError(f'{path}:{lineno}: want {{"task_id": ..., "completion": "..."}}')
        if not isinstance(row.get("completion"), str):
            raise UsageError(f'{path}:{lineno}: "completion" must be a string')
        task_id = str(row["task_id"])
        task = found.get(task_id) or domain.task_by_id(task_id)
        if task is None:
            raise UsageError(f"{path}:{lineno}: no task {task_id!r} in domain {domain.name} "
                             "(ids: a file's own, or those `evotrainer domains sample` prints)")  # fmt: skip
        found[task_id] = task
        out.append(Completion(task, row["completion"]))
    return out


def score_all(domain: Domain, settings: Any, jobs: list[Completion]) -> list[dict[str, Any]]:
    """One row per completion: task_id, reward (the weighted total), components, and the
    domain's details (`Domain.score_with_details`: tests, tampering, ...)."""
    rows = []
    for job in jobs:
        components, details = domain.score_with_details(job.task, job.completion)
        reward = settings.total_reward(components, domain.reward_components)
        rows.append({**details, "task_id": job.task.task_id, "reward": reward, "components": dict(components)})
    return rows
