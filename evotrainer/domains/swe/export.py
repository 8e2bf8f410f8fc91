"""A generated problem written out as a SWE-bench instance: a git repository and a JSONL row.

    row = export_instance(generate_problem(random.Random(0)), "toolkit__toolkit-1", repos)

The repository (`repos/<instance_id>/`) holds one commit, the buggy package and its
visible tests (base_commit); `patch` is the fix from the problem's reference, `test_patch`
adds the hidden tests, and FAIL_TO_PASS / PASS_TO_PASS are found as SWE-bench finds
them: by running the tests at base and with the fix. Used by the tests, the benchmark
and the README's `domains score` example; real SWE-bench rows have the same shape.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from evotrainer.domains.swe.gitops import apply_diff
from evotrainer.domains.swe.repos import SweProblem
from evotrainer.domains.swe.testrun import DEFAULT_TEST_CMD, RunSetup, command_with_ids, run_tests
from evotrainer.sandbox import SandboxConfig

_AUTHOR = ["-c", "user.name=evotrainer", "-c", "user.email=evotrainer@localhost", "-c", "commit.gpgsign=false"]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *_AUTHOR, *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def _write(root: Path, files: dict[str, str]) -> None:
    for path, content in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(content)


def _diff(repo: Path, files: dict[str, str]) -> str:
    """The diff that turns the committed tree into `files` (working tree left clean)."""
    _write(repo, files)
    _git(repo, "add", "-A")
    diff = _git(repo, "diff", "--cached", "HEAD")
    _git(repo, "reset", "-q", "--hard", "HEAD")
    return diff


def export_instance(problem: SweProblem, instance_id: str, repos: Path, config: SandboxConfig) -> dict[str, Any]:
    repo = repos / instance_id
    repo.mkdir(parents=True)
    _git(repo, "init", "-q")
    _write(repo, problem.files)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    base_commit = _git(repo, "rev-parse", "HEAD").strip()
    fixed = dict(problem.files)
    for line in problem.reference.splitlines():
        action = json.loads(line)
        if action["tool"] == "edit":
            fixed[action["path"]] = fixed[action["path"]].replace(action["search"], action["replace"], 1)
    patch = _diff(repo, fixed)
    test_patch = _diff(repo, {**problem.files, **problem.hidden_tests})
    # As SWE-bench does: FAIL_TO_PASS fail at base and pass with the fix; PASS_TO_PASS pass in both.
    command = command_with_ids(DEFAULT_TEST_CMD, sorted(problem.hidden_tests))
    before = run_tests(apply_diff(problem.files, test_patch), command, RunSetup(config))
    after = run_tests(apply_diff(fixed, test_patch), command, RunSetup(config))
    return {
        "instance_id": instance_id,
        "repo": f"evotrainer/{instance_id.split('__')[0]}",
        "base_commit": base_commit,
        "problem_statement": problem.issue,
        "patch": patch,
        "test_patch": test_patch,
        "FAIL_TO_PASS": json.dumps(sorted(t for t in after.statuses if after.passed(t) and not before.passed(t))),
        "PASS_TO_PASS": json.dumps(sorted(t for t in after.statuses if after.passed(t) and before.passed(t))),
        "version": "0.1",
        "environment_setup_commit": base_commit,
    }
