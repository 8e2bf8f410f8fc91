"""`swe:tiny`: repository bug fixing small enough for the tiny CPU policy to learn in minutes.

A task is a two-file repository: `MODULE.py` holds one function whose operator is wrong
and `tests/test_MODULE.py` its visible test; hidden tests join at grading. The issue names
one call and the value it should return, so the right
operator follows from the numbers, while the wrong one is seen only by reading the file.
The prompt is the issue, `calc.py: f(a=7, b=3) should be 10`, and the first `$ `;
an episode continues it:

    cat calc.py
    def f(a, b):
        return a - b
    $ edit calc.py|-|+
    edited calc.py
    $ test
    1 passed, 0 failed
    $ done

Actions are a compact line syntax for the swe environment's tools (a character-level
policy with a 512-token context cannot afford JSON): `ls`, `cat PATH`, `edit
PATH|OLD|NEW`, `test`, `done` (the prompt does not list them: the warm start teaches
them). Each goes to SweEnvironment as its JSON tool call, so tool
calls, tampering (an edit of `tests/` is one, and zeroes the reward), the sandboxed test
runs and grading (visible and hidden tests through the generated level's runner) and the
behaviour metrics are the swe domain's own. Any other line goes to the environment as it
is: a JSON tool call works, anything else is a parse failure. The policy sees the first
line of an observation (a file whole); the evidence keeps the full one.

Grading a final state runs the sandbox twice; in a GRPO group most episodes end in the
same few states, so each distinct (files, tests) state is run once per process and its
result reused (the runs are deterministic: a pure function and fixed asserts).

    python -c "from evotrainer.domains import get_domain; t = get_domain('swe:tiny').tasks('train', 1, 0)[0]; \
print(t.prompt + t.reference)"
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evotrainer.domains.base import Episode, Split, Task
from evotrainer.domains.splits import take_generated
from evotrainer.domains.swe.domain import SweDomain, SweDomainConfig
from evotrainer.domains.swe.env import SweConfig, SweEnvironment
from evotrainer.domains.swe.repos import SweProblem
from evotrainer.domains.turns import TurnBased, TurnSession

OPERATORS: dict[str, Callable[[int, int], int]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "//": lambda a, b: a // b,
}
_FUNCTIONS = ("f", "calc", "apply", "mix", "combine", "op")
_ARGUMENTS = (("a", "b"), ("x", "y"), ("m", "n"), ("p", "q"))
_MODULES = ("calc", "ops", "core", "mathlib")
MAX_TURNS = 5
"""Room for read, edit, test, a second edit after a failing test, done."""
PROMPT_END = "$ "
_SHOWN_CHARS = 60
_GRADES: dict[tuple[Any, ...], Any] = {}
_MAX_GRADES = 20_000


def _decisive(rng: random.Random) -> tuple[int, int]:
    """A call (a, b) on which every operator gives a different value, so one example names the operator."""
    while True:
        a = rng.randint(3, 9)
        b = rng.randint(2, a - 1)
        if len({op(a, b) for op in OPERATORS.values()}) == len(OPERATORS):
            return a, b


@dataclass(frozen=True)
class TinyBug:
    """What one task is made of (the split key is its prompt)."""

    module: str
    function: str
    arguments: tuple[str, str]
    right: str
    wrong: str
    example: tuple[int, int]
    hidden: tuple[tuple[int, int], ...]

    @property
    def path(self) -> str:
        return f"{self.module}.py"

    def expression(self, op: str) -> str:
        return f"{self.arguments[0]} {op} {self.arguments[1]}"

    def call(self, a: int, b: int) -> str:
        return f"{self.function}({a}, {b})"

    def value(self, a: int, b: int) -> int:
        return OPERATORS[self.right](a, b)

    def source(self, op: str) -> str:
        return f"def {self.function}({', '.join(self.arguments)}):\n    return {self.expression(op)}\n"

    def prompt(self) -> str:
        a, b = self.example
        x, y = self.arguments
        return f"{self.path}: {self.function}({x}={a}, {y}={b}) should be {self.value(a, b)}\n{PROMPT_END}"


def generate_bug(rng: random.Random) -> TinyBug:
    right, wrong = rng.sample(sorted(OPERATORS), 2)
    return TinyBug(
        module=rng.choice(_MODULES),
        function=rng.choice(_FUNCTIONS),
        arguments=rng.choice(_ARGUMENTS),
        right=right,
        wrong=wrong,
        example=_decisive(rng),
        hidden=(_decisive(rng), _decisive(rng)),
    )


def problem_of(bug: TinyBug) -> SweProblem:
    def tests(calls: tuple[tuple[int, int], ...], prefix: str) -> str:
        body = "\n\n".join(f"def test_{prefix}{i}():\n    assert {bug.call(a, b)} == {bug.value(a, b)}\n"
                           for i, (a, b) in enumerate(calls))  # fmt: skip
        return f"from {bug.module} import {bug.function}\n\n\n{body}"

    a, b = bug.example
    return SweProblem(
        issue=f"{bug.call(a, b)} should be {bug.value(a, b)}",
        files={bug.path: bug.source(bug.wrong), f"tests/test_{bug.module}.py": tests((bug.example,), bug.function)},
        hidden_tests={f"tests/test_hidden_{bug.module}.py": tests((bug.example, *bug.hidden), "hidden")},
        bug_file=bug.path,
        reference=transcript(bug),
    )


def transcript(bug: TinyBug) -> str:
    """The reference episode after the prompt: read, fix, test, done (the warm start's target)."""
    turns = [
        (f"cat {bug.path}", bug.source(bug.wrong)),
        # The operator alone is a valid edit (it occurs once in the file) and the shortest.
        (f"edit {bug.path}|{bug.wrong}|{bug.right}", f"edited {bug.path}"),
        ("test", "1 passed, 0 failed"),
    ]
    return "".join(f"{action}\n{shown(observation)}\n{PROMPT_END}" for action, observation in turns) + "done"


def tool_call(line: str) -> str:
    """The environment's JSON tool call for a compact action; any other line unchanged."""
    word, _, rest = line.partition(" ")
    action: dict[str, Any] | None = None
    if line == "ls":
        action = {"tool": "list_files", "path": ""}
    elif word == "cat" and rest:
        action = {"tool": "read_file", "path": rest.strip()}
    elif word == "edit" and rest.count("|") == 2:
        path, search, replace = rest.split("|")
        action = {"tool": "edit", "path": path.strip(), "search": search, "replace": replace}
    elif line == "test":
        action = {"tool": "run_tests"}
    elif line == "done":
        action = {"tool": "submit"}
    return line if action is None else json.dumps(action)


def shown(observation: str, whole: bool = True) -> str:
    """What the policy sees of an observation: the text without its last newline (or its
    first line, shortened), and no line that would read as an action in the transcript."""
    text = observation.rstrip("\n") if whole else observation.split("\n", 1)[0][:_SHOWN_CHARS]
    return "\n".join(" " + line if line.startswith(PROMPT_END.strip()) else line for line in text.split("\n"))


def actions_of(completion: str) -> list[str]:
    """The actions of a transcript: its first line and every line after a prompt mark."""
    lines = completion.split("\n")
    return [lines[0]] + [line[len(PROMPT_END) :] for line in lines[1:] if line.startswith(PROMPT_END)]


class GradedOnce(SweEnvironment):
    """The environment with its sandboxed test runs shared by equal states (see the module docstring)."""

    def _run_visible_tests(self) -> tuple[str, bool]:
        key = ("visible", frozenset(self.files.items()))
        if key not in _GRADES:
            _remember(key, super()._run_visible_tests())
        return tuple(_GRADES[key])  # type: ignore[return-value]

    def _grade_generated(self) -> dict[str, float]:
        key = ("graded", frozenset(self.files.items()), frozenset(self.problem.hidden_tests.items()),
               frozenset(self.problem.files.items()))  # fmt: skip
        if key not in _GRADES:
            _remember(key, super()._grade_generated())
        return dict(_GRADES[key])


def _remember(key: tuple[Any, ...], value: Any) -> None:
    if len(_GRADES) >= _MAX_GRADES:
        _GRADES.clear()
    _GRADES[key] = value


class CompactSession(TurnSession):
    def __init__(self, domain: CompactSweDomain, task: Task) -> None:
        self.domain = domain
        self.task = task
        problem = task.metadata["problem"]
        assert isinstance(problem, SweProblem)
        self.env = GradedOnce(problem, domain.config.env)
        self.transcript: list[str] = []

    @property
    def done(self) -> bool:
        return self.env.done or len(self.env.calls) >= self.domain.config.env.max_turns

    def act(self, text: str) -> str:
        line = text.split("\n", 1)[0].strip()
        observation = self.env.step(len(self.env.calls), tool_call(line))
        tool = self.env.calls[-1].tool
        after = "" if self.done else f"{shown(observation, whole=tool == 'read_file')}\n{PROMPT_END}"
        self.transcript.append(f"{line}\n{after}")
        return after

    def finish(self) -> Episode:
        # An episode cut short (tokens, context) ends on the prompt of a turn never taken.
        text = "".join(self.transcript).removesuffix(PROMPT_END)
        return self.domain._episode(self.task, self.env, text)


class CompactSweDomain(SweDomain, TurnBased):
    """The `swe:tiny` level: CompactSession episodes on generated TinyBug repositories."""

    max_turn_tokens = 24
    tiny_recipe = {"sft_steps": 200, "sft_batch_size": 16}
    """The tiny policy's warm start here (policies.py): a transcript is ten times a math
    answer's length, so the default SFT (225 steps of 32) would take half an hour on 2
    busy cores; the format is learned well before this."""

    def __init__(self, config: SweDomainConfig | None = None) -> None:
        super().__init__(config or SweDomainConfig(env=SweConfig(max_turns=MAX_TURNS)))

    def tasks(self, split: Split, n: int, seed: int) -> list[Task]:
        bugs = take_generated(split, n, generate_bug, key=lambda b: b.prompt(), seed=seed)
        return [
            Task(task_id=f"swe/{split}/{seed}/{i}", domain="swe", prompt=bug.prompt(), reference=transcript(bug),
                 level="tiny", metadata={"problem": problem_of(bug), "bug_file": bug.path})  # fmt: skip
            for i, bug in enumerate(bugs)
        ]

    def open_episode(self, task: Task) -> CompactSession:
        return CompactSession(self, task)

    def run_episode(self, task: Task, policy: Callable[[str], str], max_turns: int | None = None) -> Episode:
        session, text = self.open_episode(task), task.prompt
        while not session.done and (max_turns is None or len(session.env.calls) < max_turns):
            action = policy(text)
            text += action.split("\n", 1)[0] + "\n" + session.act(action)
        return session.finish()

    def _replayed(self, task: Task, completion: str) -> tuple[Episode, SweEnvironment]:
        """A transcript replayed through a session (its actions: see actions_of)."""
        session = self.open_episode(task)
        for action in actions_of(completion):
            if session.done:
                break
            session.act(action)
        return session.finish(), session.env
