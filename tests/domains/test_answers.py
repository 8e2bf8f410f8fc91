"""Math answers checked by math-verify: the cases found from outside, their neighbours, no
false positive, answers that would hang SymPy, threads, and the integer fast path."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evotrainer.domains.answers import _matches, is_correct, is_well_formatted
from evotrainer.domains.base import Task
from evotrainer.domains.math import MathDomain

MINUS = "\u2212"

# completion, reference, correct, well formatted
CASES = [
    # Scored wrong before math-verify.
    (r"\boxed{\frac{84}{2}}", "42", True, True),
    (r"$\dfrac{1}{2}$", "1/2", True, True),
    (r"$\dfrac{1}{2}$", r"\frac{1}{2}", True, True),
    (r"\boxed{1{,}234}", "1234", True, True),
    (f"{MINUS}7", "-7", True, True),
    (f"{MINUS}7 degrees", "-7", True, False),
    # Accepted wrongly before: the sign was dropped, the last number was the denominator.
    (f"{MINUS}7 degrees", "7", False, False),
    (r"$\dfrac{1}{2}$", "2", False, True),
    (r"$\dfrac{1}{2}$", "1", False, True),
    # Negative numbers.
    ("-7", "-7", True, True),
    ("7", "-7", False, True),
    ("-7", "7", False, True),
    (r"\boxed{-7}", "-7", True, True),
    ("#### -7", "-7", True, True),
    (f"{MINUS}7\u00b0", "-7", True, False),
    # Fractions and decimals.
    ("3/4", "0.75", True, True),
    (r"\boxed{\frac{3}{4}}", "3/4", True, True),
    ("0.5", r"\frac12", True, True),
    ("1/7", "7", False, True),
    ("7.5", "7", False, True),
    ("7.0", "7", True, True),
    # Percents.
    ("50%", "50", True, False),
    (r"\boxed{50\%}", "50", True, True),
    ("50%", "5", False, False),
    # Thousands separators.
    ("1,234", "1234", True, True),
    ("#### 1,234", "1234", True, True),
    ("1234", "1,234", True, True),
    (r"\boxed{1,234}", "1234", True, True),
    ("1,234.5", "1234.5", True, True),
    ("1,234", "234", False, True),
    ("12,345", "1234", False, True),
    # Units after the number.
    ("7 apples", "7", True, False),
    (r"\boxed{7 \text{ cm}}", "7", True, True),
    ("18 dollars", "18", True, False),
    ("$18", "18", True, True),
    ("17 apples", "7", False, False),
    # Several boxed answers: all must be right (boxing every candidate is hedging).
    (r"\boxed{3} or \boxed{7}", "7", False, False),
    (r"\boxed{7} or \boxed{3}", "7", False, False),
    (r"\boxed{7}, so again \boxed{7}", "7", True, False),
    # No false positive: the reference inside the answer is not the answer.
    ("17", "7", False, True),
    ("70", "7", False, True),
    (r"\boxed{77}", "7", False, True),
    ("The answer is 17.", "7", False, False),
    ("7 or 8", "7", False, False),
    # Prose: LaTeX at its end, else the last number (math-verify alone skips junk it cannot
    # parse and settles on an earlier number).
    ("0017-+74", "17", False, False),
    ("3)93(", "3", False, False),
    ("9+478+", "478", True, False),
    ("so it is $\\frac{1}{2}$.", "1/2", True, False),
    ("it is $\\frac{1}{2}$ of 4", "1/2", False, False),
    # Plain shapes.
    ("7", "7", True, True),
    ("007", "7", True, True),
    (r"\boxed{7}.", "7", True, True),
    ("so 3 + 4 = 7\n#### 7", "7", True, True),
    ("The final answer is 12.", "12", True, False),
    ("seven", "7", False, False),
    ("", "7", False, False),
    # Answers SymPy would evaluate for ever are refused, quickly.
    (r"\boxed{9^{9^{9^{9}}}}", "7", False, False),
    ("9^9^9^9", "7", False, False),
    (r"\boxed{9!!!!}", "7", False, False),
    (r"\boxed{(10^{100})!}", "7", False, False),
    # A computation is not an answer: the generated levels' prompts are computations.
    ("12*7", "84", False, False),
    ("3+4", "7", False, False),
    ("(4+5)*3-2", "25", False, False),
    (r"\boxed{12 \times 7}", "84", False, True),
    (r"\boxed{\frac{12 \cdot 7}{1}}", "84", False, True),
    (r"\boxed{5!}", "120", False, True),
    (r"\boxed{2^{10}}", "1024", False, True),
    ("84/2", "42", True, True),
    (r"\boxed{84/2}", "42", True, True),
    ("-1/2", "-0.5", True, True),
    (r"\boxed{-\frac{1}{2}}", "-1/2", True, True),
    # Against a symbolic reference, equal expressions are equal.
    (r"\boxed{2\sqrt{2}}", r"\sqrt{8}", True, True),
    (r"\boxed{x^2+2x+1}", "(x+1)^2", True, True),
]


@pytest.mark.parametrize(("completion", "reference", "correct", "formatted"), CASES)
def test_answer_table(completion: str, reference: str, correct: bool, formatted: bool) -> None:
    started = time.perf_counter()
    rewards = MathDomain().score(Task("t", "math", "?", reference=reference), completion)
    assert {c: rewards[c] for c in ("correctness", "format")} == {"correctness": float(correct), "format": float(formatted)}
    assert time.perf_counter() - started < 3.0  # the first call also imports SymPy


def test_scoring_works_off_the_main_thread() -> None:
    """math-verify's own timeouts use SIGALRM, which fails outside the main thread."""
    results: list[bool] = []
    thread = threading.Thread(target=lambda: results.append(is_correct(r"\boxed{\frac{6}{3}}", "2")))
    thread.start()
    thread.join(30)
    assert results == [True]


@settings(max_examples=200, deadline=None)
@given(st.integers(-(10**17), 10**17), st.integers(-(10**17), 10**17))
def test_the_integer_fast_path_gives_math_verify_verdict(a: int, b: int) -> None:
    for x, y in ((a, b), (a, a)):
        assert is_correct(str(x), str(y)) == _matches("hashes", str(x), str(y)) == (x == y)


def test_score_cost() -> None:
    """Training scores thousands of completions a step: the plain integers tiny policies
    write take the fast path; other shapes go through math-verify (cached per answer)."""
    is_correct(r"\boxed{\frac{1}{2}}", "1/2")  # imports SymPy and ANTLR once
    started = time.perf_counter()
    for i in range(10_000):
        is_correct(str(i), "64")
        is_well_formatted(str(i))
    fast = (time.perf_counter() - started) / 10_000
    started = time.perf_counter()
    for i in range(200):
        is_correct(rf"\boxed{{\frac{{{i}}}{{2}}}}", "64")
    slow = (time.perf_counter() - started) / 200
    assert fast < 50e-6, f"{fast * 1e6:.1f} us per plain integer"
    assert slow < 0.05, f"{slow * 1e3:.1f} ms per LaTeX answer"


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200), st.sampled_from(["7", "-3", "1/2", r"\frac{1}{2}", "1,234", "x+1"]))
def test_arbitrary_text_never_raises(text: str, reference: str) -> None:
    assert isinstance(is_correct(text, reference), bool)
    assert isinstance(is_well_formatted(text), bool)
