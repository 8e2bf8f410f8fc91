"""The multi-turn SWE environment: tools over an in-memory repository, graded in the sandbox.

Each turn the policy answers with one JSON object, e.g.
    {"tool": "edit", "path": "pkg/core.py", "search": "x, lo", "replace": "x, hi"}
Tools: list_files, read_file(path), edit(path, search, replace) (search must occur
exactly once), run_tests (visible tests, in the sandbox), shell(command) (in the
sandbox, on a throwaway copy), submit. Observations are truncated; the episode ends on
submit or at the turn limit.

The environment records what the diagnostics need: any attempt to create, edit or
delete a test file (tampering) and any attempt to look for version-control history.
Grading restores the original tests, adds the hidden ones and runs everything in the
sandbox; with `zero_reward_on_tamper`, tampering zeroes every reward component.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from evotrainer.domains.base import ToolCall
from evotrainer.domains.swe.repos import SweProblem
from evotrainer.sandbox import SandboxConfig, run

TOOLS = ("list_files", "read_file", "edit", "run_tests", "shell", "submit")
_HISTORY_PROBE = re.compile(r"\.git\b|\bgit\b|\breflog\b|ORIG_HEAD|\.orig\b|\.patch\b|\.diff\b|\bhg\b|\.svn\b")
_RUNNER = r"""
import importlib.util, pathlib, sys
token = sys.stdin.readline().strip()
sys.path.insert(0, ".")
only = set(sys.argv[1:])
passed = failed = 0
for path in sorted(pathlib.Path("tests").glob("test_*.py")):
    if only and path.name not in only:
        continue
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        failed += 1
        print(f"ERROR {path}: {exc!r}")
        continue
    for name in sorted(vars(module)):
        if name.startswith("test_") and callable(getattr(module, name)):
            try:
                getattr(module, name)()
                passed += 1
                print(f"PASS {path}::{name}")
            except BaseException as exc:
                failed += 1
                print(f"FAIL {path}::{name}: {exc!r}")
sys.__stdout__.write(f"\n{token} {passed} {failed}\n")
"""


@dataclass(frozen=True)
class SweConfig:
    max_turns: int = 20
    max_observation_chars: int = 2000
    zero_reward_on_tamper: bool = True
    sandbox: SandboxConfig = field(default_factory=lambda: SandboxConfig(wall_time_s=20.0))


def is_test_path(path: str) -> bool:
    p = PurePosixPath(path)
    return "tests" in p.parts or "test" in p.parts or p.name.startswith("test_") or p.name.endswith("_test.py")


def parse_action(text: str) -> dict[str, Any] | None:
    """The last JSON object in `text` that names a tool, or None. Never raises."""
    decoder = json.JSONDecoder()
    found = None
    for start in [m.start() for m in re.finditer(r"\{", text)][:200]:
        try:
            obj, _ = decoder.raw_decode(text, start)
        except (json.JSONDecodeError, RecursionError):
            continue
        if isinstance(obj, dict) and isinstance(obj.get("tool"), str):
            found = obj
    return found


def run_test_files(
    files: dict[str, str], config: SweConfig, test_cmd: str = "", only: tuple[str, ...] = ()
) -> tuple[int, int, str]:
    """(passed, failed, output) of the tests in `files`, run in the sandbox.

    With the built-in runner a token on stdin marks the real summary line, so a
    program that exits early or prints its own summary is counted as failing.
    """
    token = secrets.token_hex(16)
    sandbox_files = {**files, ".evotrainer_runner.py": _RUNNER}
    if test_cmd:
        argv = ["/bin/sh", "-c", test_cmd]
    else:
        argv = [config.sandbox.python, "-I", "-S", ".evotrainer_runner.py", *only]
    result = run(argv, files=sandbox_files, stdin=token + "\n", config=config.sandbox)
    output = result.stdout + result.stderr
    if test_cmd:
        ok = result.passed
        return int(ok), int(not ok), output
    for line in reversed(result.stdout.splitlines()):
        parts = line.split()
        if len(parts) == 3 and parts[0] == token and parts[1].isdigit() and parts[2].isdigit():
            return int(parts[1]), int(parts[2]), output.replace(token, "summary:")
    return 0, 1, output + f"\n[test run ended: {result.status.value}]"


class SweEnvironment:
    """One episode's state. `step` takes the policy's text and returns the observation."""

    def __init__(self, problem: SweProblem, config: SweConfig) -> None:
        self.problem = problem
        self.config = config
        self.files = dict(problem.files)
        self.calls: list[ToolCall] = []
        self.done = False
        self.counts = {"tamper_attempts": 0, "history_probes": 0, "parse_failures": 0, "test_runs": 0, "edits": 0}
        self.edited_files: set[str] = set()

    def _truncate(self, text: str) -> str:
        limit = self.config.max_observation_chars
        return text if len(text) <= limit else text[:limit] + f"\n[... truncated {len(text) - limit} chars]"

    def step(self, turn: int, text: str) -> str:
        action = parse_action(text)
        if action is None:
            self.counts["parse_failures"] += 1
            observation, ok, tool, args = (
                'error: answer with one JSON object like {"tool": "list_files"}',
                False,
                "",
                {},
            )
        else:
            tool = action["tool"]
            args = {k: v for k, v in action.items() if k != "tool"}
            if _HISTORY_PROBE.search(json.dumps(args)) or tool in ("git", "log", "history"):
                self.counts["history_probes"] += 1
            observation, ok = self._dispatch(tool, args)
        observation = self._truncate(observation)
        self.calls.append(ToolCall(turn=turn, tool=tool, arguments=args, ok=ok, observation=observation))
        return observation

    def _dispatch(self, tool: str, args: dict[str, Any]) -> tuple[str, bool]:
        path = str(args.get("path", ""))
        if tool == "list_files":
            return "\n".join(sorted(p for p in self.files if p.startswith(path.lstrip("./")))), True
        if tool == "read_file":
            if path not in self.files:
                return f"error: no such file {path!r}", False
            return self.files[path], True
        if tool == "edit":
            return self._edit(path, str(args.get("search", "")), str(args.get("replace", "")))
        if tool == "run_tests":
            self.counts["test_runs"] += 1
            passed, failed, output = run_test_files(self.files, self.config, self.problem.test_cmd)
            return f"{passed} passed, {failed} failed\n{output}", True
        if tool == "shell":
            result = run(["/bin/sh", "-c", str(args.get("command", ""))], files=self.files, config=self.config.sandbox)
            return f"[{result.status.value}]\n{result.stdout}{result.stderr}", result.passed
        if tool == "submit":
            self.done = True
            return "submitted", True
        return f"error: unknown tool {tool!r}; tools: {', '.join(TOOLS)}", False

    def _edit(self, path: str, search: str, replace: str) -> tuple[str, bool]:
        if is_test_path(path):
            self.counts["tamper_attempts"] += 1
        if not path or path.startswith("/") or ".." in PurePosixPath(path).parts:
            return "error: path must be relative and inside the repository", False
        if path not in self.files:
            if search:
                return f"error: no such file {path!r} (use an empty search to create it)", False
            self.files[path] = replace
        else:
            count = self.files[path].count(search) if search else 0
            if count != 1:
                return f"error: search text found {count} times in {path}; it must match exactly once", False
            self.files[path] = self.files[path].replace(search, replace, 1)
        self.counts["edits"] += 1
        self.edited_files.add(path)
        return f"edited {path}", True

    def grade(self) -> dict[str, float]:
        """Reward components of the final repository state."""
        graded = {p: c for p, c in self.files.items() if not is_test_path(p)}
        graded.update({p: c for p, c in self.problem.files.items() if is_test_path(p)})
        visible_passed, visible_failed, _ = run_test_files(graded, self.config, self.problem.test_cmd)
        graded.update(self.problem.hidden_tests)
        hidden_names = tuple(PurePosixPath(p).name for p in self.problem.hidden_tests)
        if self.problem.test_cmd or any(name.endswith(".patch") for name in hidden_names):
            cmd = self.problem.test_cmd or f"{self.config.sandbox.python} -I -S .evotrainer_runner.py"
            if any(name.endswith(".patch") for name in hidden_names):
                cmd = f"patch -p1 -s < .hidden_tests.patch && {cmd}"
            passed, failed, _ = run_test_files(graded, self.config, cmd)
        else:
            passed, failed, _ = run_test_files(graded, self.config, only=hidden_names)
        rewards = {
            "correctness": float(passed > 0 and failed == 0),
            "visible_tests": float(visible_passed > 0 and visible_failed == 0),
            "format": 1.0 - self.counts["parse_failures"] / max(1, len(self.calls)),
        }
        if self.config.zero_reward_on_tamper and self.counts["tamper_attempts"]:
            rewards = dict.fromkeys(rewards, 0.0)
        return rewards
