"""Text a policy (or a dataset file) can hold that made scoring raise, stall or eat memory.

Scoring runs inside training and evaluation, so any of these ending in an exception or
a minutes-long computation would end a run: a denial of service by the policy. Each was
found by a hostile review; each must now cost little and end in a verdict or in one
clear error.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from evotrainer.domains.answers import boxed_answers, is_correct
from evotrainer.domains.code_problems import load_stdio_jsonl
from evotrainer.domains.files import json_lines
from evotrainer.domains.math import load_math_jsonl
from evotrainer.errors import UsageError

# Expressions whose comparison SymPy would work at for minutes (and gigabytes): an
# answer is a value, so none of them is one.
COSTLY = [
    r"\boxed{(x+y+z+w)^{1000}}",
    r"\boxed{((1+\sqrt{2})^{1000})^{1000}}",
    r"\boxed{\int_0^1 e^{x^2}\sin(x^{7}) dx}",
    r"\boxed{\sum_{i=1}^{1000000} \frac{1}{i^{i}}}",
    r"\boxed{\frac{(x+1)^{999}}{(x+2)^{999}} - \frac{(x+3)^{998}}{(x+4)^{997}}}",
    r"\boxed{\prod_{i=1}^{1000000} i}",
]


@pytest.mark.parametrize("answer", COSTLY)
@pytest.mark.parametrize("reference", [r"x^2+1", r"\sqrt{2}"])
def test_a_costly_expression_is_refused_quickly(answer: str, reference: str) -> None:
    start = time.perf_counter()
    assert not is_correct(answer, reference)
    assert time.perf_counter() - start < 10


def test_symbolic_answers_that_cost_little_still_count() -> None:
    assert is_correct(r"\boxed{(x+1)^2 - 2x}", "x^2+1")
    assert is_correct(r"\boxed{\sqrt{2}}", r"\sqrt{2}")
    assert is_correct(r"\boxed{x^{12} + 1}", "x^{12}+1")


def test_many_unclosed_boxes_take_linear_time() -> None:
    start = time.perf_counter()
    assert boxed_answers("\\boxed{" * 20000) == []
    assert time.perf_counter() - start < 1
    assert boxed_answers(r"\boxed{ \boxed{7} {\boxed{a{b}c}") == ["7", "a{b}c"]


def _write(tmp_path: Path, name: str, line: str) -> Path:
    path = tmp_path / name
    path.write_text(line + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("line", [
    '{"task_id": ' + "1" * 5000 + ', "completion": "1"}',
    "[" * 100_000 + "]" * 100_000,
])  # fmt: skip
def test_a_completions_file_json_cannot_take_is_one_error(tmp_path: Path, line: str) -> None:
    with pytest.raises(UsageError, match=r"x\.jsonl:1: not JSON"):
        list(json_lines(_write(tmp_path, "x.jsonl", line)))


def test_a_line_separator_inside_a_json_string_is_no_line_break(tmp_path: Path) -> None:
    path = _write(tmp_path, "x.jsonl", json.dumps({"completion": "a\u2028b"}, ensure_ascii=False))
    assert list(json_lines(path)) == [(1, {"completion": "a\u2028b"})]


@pytest.mark.parametrize("row", [
    '{"question": "q", "input_output": "{\\"inputs\\": [\\"1\\"], \\"outputs\\": [\\"1\\"]}", "solutions": 5}',
    '{"question": "q", "input_output": "{\\"inputs\\": [\\"1\\"], \\"outputs\\": [\\"1\\"]}", "solutions": {"solution": 7}}',
    '{"description": "q", "public_tests": [1]}',
    '{"description": "q", "public_tests": "abc"}',
    '{"description": ' + "[" * 100_000 + "]" * 100_000 + "}",
])  # fmt: skip
def test_a_malformed_code_file_line_is_one_error(tmp_path: Path, row: str) -> None:
    with pytest.raises(UsageError, match=r"apps\.jsonl:1: "):
        load_stdio_jsonl(_write(tmp_path, "apps.jsonl", row))


def test_a_math_line_nested_past_the_stack_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"m\.jsonl:1: "):
        load_math_jsonl(_write(tmp_path, "m.jsonl", '{"question": ' + "[" * 100_000 + "]" * 100_000 + "}"))
