"""The code domain: function synthesis (generated, HumanEval) and stdin/stdout problems.

Every candidate runs in the sandbox (evotrainer.sandbox) with a grading harness
(code_harness.py), which keeps the expected answers out of the candidate's reach; nothing
the policy wrote is compiled or executed on the host.
Reward components, each reported separately:
  correctness    1 if every test passed
  pass_fraction  the fraction of tests passed (the continuous signal)
  compile        1 if the assembled program compiles
  format         1 if the completion has the expected shape (a body continuing the
                 prompt, a definition of the entry point, or a non-empty program)
"""

from __future__ import annotations

import json
import re
import secrets
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from evotrainer.domains.base import Domain, Episode, Split, Task
from evotrainer.domains.code_harness import FUNCTION_HARNESS, STDIO_HARNESS, normalised_digest
from evotrainer.domains.code_problems import (
    DEFAULT_LEVELS,
    GENERATED_LEVELS,
    generate_function_task,
    humaneval_tasks,
    load_stdio_jsonl,
)
from evotrainer.domains.splits import take_all, take_fixed, take_generated
from evotrainer.errors import UsageError
from evotrainer.sandbox import SandboxConfig, Status, run_python

SOURCES = ("generated", "humaneval", "file")
_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)


@dataclass(frozen=True)
class CodeConfig:
    source: str = "generated"
    """generated (function synthesis from a seed), humaneval, or file (APPS-style JSONL)."""
    levels: tuple[str, ...] = DEFAULT_LEVELS
    """Levels of generated problems: constant, trivial, simple, loop (default: all but constant)."""
    jsonl: Path | None = None
    whole_file: bool = False
    """With a file: every split is the whole file in file order (`split=all`), not the hash split."""
    test_timeout_s: float = 2.0
    sandbox: SandboxConfig = field(default_factory=lambda: SandboxConfig(wall_time_s=20.0, max_processes=16))

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise UsageError(f"unknown code source {self.source!r}; choose from {', '.join(SOURCES)}")
        if (self.source == "file") != (self.jsonl is not None):
            raise UsageError("code source 'file' needs jsonl=PATH, and jsonl needs source 'file'")
        if self.whole_file and self.source != "file":
            raise UsageError("whole_file (split=all) applies to a file: use source 'file' with jsonl=PATH")
        unknown = [lv for lv in self.levels if lv not in GENERATED_LEVELS]
        if unknown or not self.levels:
            raise UsageError(f"unknown code level(s) {unknown}; choose from {', '.join(GENERATED_LEVELS)}")


def extract_code(completion: str) -> str:
    """The first fenced code block if there is one, else the completion as written."""
    match = _FENCE.search(completion)
    return match.group(1) if match else completion


def assemble(task: Task, completion: str) -> str:
    """The program a function task's tests run against: prompt + body, or the full definition."""
    code = extract_code(completion)
    if task.metadata.get("kind") == "stdio":
        return code
    return f"{task.prompt}\n{code}" if f"def {task.metadata['entry_point']}(" in code else task.prompt + code


def has_expected_format(task: Task, completion: str) -> bool:
    code = extract_code(completion)
    if not code.strip():
        return False
    if task.metadata.get("kind") == "stdio":
        return True
    return code[:1] in (" ", "\t") or f"def {task.metadata['entry_point']}(" in code


def _is_unicode(text: str) -> bool:
    """Whether `text` can be written as UTF-8 (no lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _harness_lines(stdout: str, token: str, n_tests: int) -> tuple[float, dict[int, str]]:
    """The harness's compile flag and one verdict per test index. Anything else bearing
    the token (a second line for a test, an index out of range) can only be forged, so
    then no test counts as passed."""
    compiled, verdicts = 0.0, {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) != 3 or parts[0] != token:
            continue
        if parts[1] == "compile":
            compiled = float(parts[2] == "1")
        elif not parts[1].isdecimal() or int(parts[1]) >= n_tests or int(parts[1]) in verdicts:
            return compiled, {}
        else:
            verdicts[int(parts[1])] = parts[2]
    return compiled, verdicts


class CodeDomain(Domain):
    name = "code"
    reward_components = ("correctness", "pass_fraction", "compile", "format")

    def __init__(self, config: CodeConfig | None = None) -> None:
        self.config = config or CodeConfig()
        self._pool: list[Task] | None = None
        if self.config.source == "humaneval":
            self._pool = humaneval_tasks()
        elif self.config.source == "file" and self.config.jsonl is not None:
            self._pool = load_stdio_jsonl(self.config.jsonl)

    def tasks(self, split: Split, n: int, seed: int) -> list[Task]:
        if self._pool is not None:
            if self.config.whole_file:
                return take_all(n, self._pool)
            return take_fixed(split, n, self._pool, key=lambda t: t.task_id, seed=seed)
        items = take_generated(
            split,
            n,
            lambda rng: generate_function_task(rng, self.config.levels),
            key=lambda item: item["prompt"] + "\n".join(item["tests"]),
            seed=seed,
        )
        return [
            Task(
                task_id=f"code/{split}/{seed}/{i}",
                domain="code",
                prompt=item["prompt"],
                reference=item["reference"],
                level=item["level"],
                metadata={"kind": "function", "entry_point": item["entry_point"], "tests": item["tests"], "setup": ""},
            )
            for i, item in enumerate(items)
        ]

    def task_by_id(self, task_id: str) -> Task | None:
        if self._pool is not None:
            return next((t for t in self._pool if t.task_id == task_id), None)
        return super().task_by_id(task_id)

    def score(self, task: Task, completion: str) -> dict[str, float]:
        stdio = task.metadata.get("kind", "function") == "stdio"
        tests = list(task.metadata.get("tests", ()))
        # What the sandbox gets: for a stdin/stdout task its inputs only; the expected
        # outputs stay here and are compared with the digests the harness prints.
        if stdio:
            spec: dict[str, object] = {"inputs": [given for given, _ in tests]}
            expected = [normalised_digest(output) for _, output in tests]
        else:
            spec = {"tests": tests, "entry_point": task.metadata.get("entry_point", ""),
                    "setup": task.metadata.get("setup", ""), "prompt": task.prompt}
        spec["test_timeout_s"] = self.config.test_timeout_s
        program = assemble(task, completion)
        if not _is_unicode(program):
            # A lone surrogate (JSON can spell one) cannot be written as a source file.
            return {"correctness": 0.0, "pass_fraction": 0.0, "compile": 0.0,
                    "format": float(has_expected_format(task, completion))}  # fmt: skip
        token = secrets.token_hex(16)
        result = run_python(
            STDIO_HARNESS if stdio else FUNCTION_HARNESS,
            files={"candidate.py": program},
            stdin=f"{token}\n{json.dumps(spec)}\n",
            config=self.config.sandbox,
            script_name="harness.py",
        )
        compiled, verdicts = _harness_lines(result.stdout, token, len(tests))
        if stdio:
            passed = sum(verdicts.get(i) == digest for i, digest in enumerate(expected))
        else:
            passed = sum(verdict == "ok" for verdict in verdicts.values())
        return {
            "correctness": float(bool(tests) and passed == len(tests) and result.status is not Status.TIMEOUT),
            "pass_fraction": passed / len(tests) if tests else 0.0,
            "compile": compiled,
            "format": float(has_expected_format(task, completion)),
        }

    def behaviour_metrics(self, episodes: Sequence[Episode]) -> dict[str, float]:
        if not episodes:
            return {}
        return {
            "pass_rate": statistics.fmean(e.rewards.get("correctness", 0.0) for e in episodes),
            "mean_pass_fraction": statistics.fmean(e.rewards.get("pass_fraction", 0.0) for e in episodes),
            "compile_rate": statistics.fmean(e.rewards.get("compile", 0.0) for e in episodes),
            "format_violation_rate": 1 - statistics.fmean(e.rewards.get("format", 0.0) for e in episodes),
            "mean_completion_chars": statistics.fmean(len(e.completion) for e in episodes),
        }
