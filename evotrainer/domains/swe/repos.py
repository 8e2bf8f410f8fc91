"""Generated SWE tasks: a small Python package with one injected bug, a failing visible
test and hidden tests; plus SWE-bench instances (instances.py) as the same problem type.

A repository is a plain mapping path -> text held in memory: the environment never
writes the policy's files on the host, and there is no git history to leak a fix.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from evotrainer.domains.swe.instances import SweInstance, load_instances

# name, signature, correct body, buggy body, visible test, hidden tests
_FUNCTIONS: tuple[tuple[str, str, str, str, str, tuple[str, ...]], ...] = (
    (
        "clamp",
        "x, lo, hi",
        "return max(lo, min(x, hi))",
        "return max(lo, min(x, lo))",
        "assert clamp(15, 0, 10) == 10",
        ("assert clamp(5, 0, 10) == 5", "assert clamp(-3, 0, 10) == 0", "assert clamp(99, 1, 7) == 7"),
    ),
    (
        "mean",
        "xs",
        "return sum(xs) / len(xs)",
        "return sum(xs) / (len(xs) + 1)",
        "assert mean([2, 4]) == 3",
        ("assert mean([1, 2, 3]) == 2", "assert mean([5]) == 5"),
    ),
    (
        "last",
        "xs",
        "return xs[-1]",
        "return xs[len(xs) - 2]",
        "assert last([1, 2, 3]) == 3",
        ("assert last([7]) == 7", "assert last(['a', 'b']) == 'b'"),
    ),
    (
        "is_adult",
        "age",
        "return age >= 18",
        "return age > 18",
        "assert is_adult(18)",
        ("assert not is_adult(17)", "assert is_adult(40)"),
    ),
    (
        "count_words",
        "text",
        "return len(text.split())",
        "return len(text.split(' '))",
        "assert count_words('a  b') == 2",
        ("assert count_words('one two three') == 3", "assert count_words('') == 0"),
    ),
    (
        "span",
        "xs",
        "return max(xs) - min(xs)",
        "return max(xs) - xs[0]",
        "assert span([3, 1, 4]) == 3",
        ("assert span([1, 5]) == 4", "assert span([9, 2, 7]) == 7"),
    ),
    (
        "percent",
        "part, whole",
        "return round(100 * part / whole)",
        "return round(100 * whole / part)",
        "assert percent(1, 4) == 25",
        ("assert percent(3, 3) == 100", "assert percent(1, 3) == 33"),
    ),
    (
        "initials",
        "name",
        "return ''.join(w[0].upper() for w in name.split())",
        "return ''.join(w[0] for w in name.split())",
        "assert initials('ada lovelace') == 'AL'",
        ("assert initials('Alan Turing') == 'AT'", "assert initials('grace b hopper') == 'GBH'"),
    ),
)
_PACKAGES = ("toolkit", "helpers_lib", "numkit", "textops", "calclib")
_MODULES = ("core", "ops", "funcs")


@dataclass(frozen=True)
class SweProblem:
    """Everything one SWE task needs; `files` is what the agent starts with."""

    issue: str
    files: dict[str, str]
    hidden_tests: dict[str, str]
    """Test files added at grading time only (never visible to the agent)."""
    bug_file: str = ""
    reference: str = ""
    """Tool calls that fix the bug, one JSON object per line, or the gold diff (for
    supervised warm starts)."""
    instance: SweInstance | None = None
    """A SWE-bench instance: graded by FAIL_TO_PASS and PASS_TO_PASS after test_patch."""
    assets: Mapping[str, bytes] = field(default_factory=dict)
    """Binary files of the repository (test data, images): in every run, never editable."""


def generate_problem(rng: random.Random) -> SweProblem:
    package, module = rng.choice(_PACKAGES), rng.choice(_MODULES)
    chosen = rng.sample(_FUNCTIONS, 3)
    buggy = rng.randrange(3)
    source, visible, hidden = [], [], []
    for i, (name, sig, good, bad, vis, hid) in enumerate(chosen):
        source.append(f"def {name}({sig}):\n    {bad if i == buggy else good}\n")
        visible.append(f"def test_{name}():\n    {vis}\n")
        hidden += [f"def test_{name}_hidden_{j}():\n    {t}\n" for j, t in enumerate((vis, *hid))]
    names = ", ".join(f[0] for f in chosen)
    imports = f"from {package}.{module} import {names}\n\n\n"
    path = f"{package}/{module}.py"
    bug_name = chosen[buggy][0]
    return SweProblem(
        issue=f"`{bug_name}` in {path} returns wrong results; tests/test_{module}.py::test_{bug_name} fails. "
        "Fix the bug in the library without changing the tests.",
        files={
            f"{package}/__init__.py": "",
            path: "\n\n".join(source),
            f"tests/test_{module}.py": imports + "\n\n".join(visible),
            "README.md": f"# {package}\n\nSmall helpers. Run the tests with the run_tests tool.\n",
        },
        hidden_tests={f"tests/test_hidden_{module}.py": imports + "\n\n".join(hidden)},
        bug_file=path,
        reference="\n".join(
            json.dumps(action)
            for action in (
                {"tool": "read_file", "path": path},
                {"tool": "edit", "path": path, "search": chosen[buggy][3], "replace": chosen[buggy][2]},
                {"tool": "run_tests"},
                {"tool": "submit"},
            )
        ),
    )


def load_swebench_jsonl(path: Path, repos: Path, pip_args: tuple[str, ...] = ()) -> list[tuple[str, SweProblem]]:
    """(instance_id, problem) for every SWE-bench instance of `path` (see instances.py)."""
    return [
        (instance.instance_id, SweProblem(issue=issue, files=files, hidden_tests={}, reference=instance.gold_patch,
                                          instance=instance, assets=assets))  # fmt: skip
        for instance, issue, files, assets in load_instances(path, repos, pip_args)
    ]
