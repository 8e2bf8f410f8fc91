"""Math answers: which part of a completion is its final answer, and whether it is right.

Equality is Hugging Face's `math-verify` (what TRL and open-r1 check math with): the
reference and the answer are parsed (LaTeX or plain text) into SymPy and compared, so
`\\boxed{\\frac{84}{2}}` is 42, `$\\dfrac{1}{2}$` is 1/2 (never 2), `\\boxed{1{,}234}` is 1234.
On top of it, the project's own rules:
- The final answer is every `\\boxed{...}` if there is one (all of them must be right:
  boxing several candidates is hedging, not answering), else the last `#### X`, else in
  prose the LaTeX math-verify finds at its end, or the last number.
- Unicode minus signs (U+2212, ...) are minus signs: "−7 degrees" is -7, never 7.
- Against a numeric reference the answer must be a number as written (`42`, `84/2`,
  `\\frac{84}{2}`, `50\\%`), not a computation (`12*7`, `3+4`) copied from the question.
- Format: the completion is a bare number, a bare `$...$` expression, text with exactly
  one `\\boxed{X}`, or text with a `#### X` line, where X parses.
- A completion that is a plain integer, against a plain integer reference, is compared as
  integers without math-verify (what the tiny policies emit; the result is the same, only
  much faster: see `score_cost` in tests/domains/test_answers.py).

math-verify's own timeouts use SIGALRM, which only works on the main thread (Celery
workers and threads score too) and cancels any other alarm (pytest-timeout's): they are
turned off, and what they guarded against (power towers, huge factorials that SymPy
would evaluate for ever) is refused by `_cheap` before anything is compared. Every
function here accepts arbitrary text, never raises and gives the same verdict every time.
"""

from __future__ import annotations

import logging
import re
import warnings
from fractions import Fraction
from functools import lru_cache
from typing import Any

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")
_HASHES = re.compile(r"####\s*([^\n]*)")
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_INTEGER = re.compile(r"-?\d{1,18}")
_MINUS = str.maketrans({"\u2212": "-", "\u2012": "-", "\ufe63": "-", "\uff0d": "-", "\u2796": "-"})
_MAX_NUMBER_CHARS = 64
"""Longer digit strings are not answers; capping them also keeps int() cheap."""
_MAX_ANSWER_CHARS = 500
"""A boxed or `####` answer longer than this is not parsed (it is wrong)."""
_MAX_TEXT_CHARS = 2000
"""Without a boxed or `####` answer, math-verify reads only the completion's tail."""
_MAX_NODES = 200
_MAX_EXPONENT = 1000
_MAX_FACTORIAL = 1000


def normalize(text: str) -> str:
    """Unicode minus signs as ASCII hyphen-minus (math-verify reads only the latter)."""
    return text.translate(_MINUS)


def boxed_answers(text: str) -> list[str]:
    """The contents of every `\\boxed{...}` (or `\\fbox{...}`) with balanced braces, in order.

    Every brace is matched in one pass first: scanning on from each `\\boxed{` for its
    closing brace would take quadratic time on a completion of many unclosed ones."""
    closing, open_at = {}, []
    for j, char in enumerate(text):
        if char == "{":
            open_at.append(j)
        elif char == "}" and open_at:
            closing[open_at.pop()] = j
    out = []
    for match in _BOXED.finditer(text):
        end = closing.get(match.end() - 1)
        if end is not None:
            out.append(text[match.end():end])
    return out


def extract_answer(text: str) -> str | None:
    """The final answer as a string (the last boxed, else the last `#### X`, else the last
    number), or None. What dataset loaders take a reference from; scoring uses `final_answers`."""
    text = normalize(text)
    boxed = boxed_answers(text)
    if boxed:
        return boxed[-1].strip()
    hashes = _HASHES.findall(text)
    if hashes:
        return hashes[-1].strip()
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else None


def parse_number(text: str) -> Fraction | None:
    """An exact number from '1,234', '-3.5', '3/4', '$7', '7.' and similar; else None."""
    cleaned = normalize(text).strip().replace(",", "").replace("$", "").rstrip(".").strip()
    if not cleaned or len(cleaned) > _MAX_NUMBER_CHARS:
        return None
    if not re.fullmatch(r"-?(?:\d+(?:\.\d*)?|\.\d+)(?:/\d+)?", cleaned):
        return None
    try:
        return Fraction(cleaned)
    except (ValueError, ZeroDivisionError):
        return None


def _quiet_math_verify() -> None:
    """math-verify warns once that its timeouts are off; here that is deliberate (see above)."""

    class _NoTimeoutNotice(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return "Timeout is disabled" not in record.getMessage()

    for name in ("math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).addFilter(_NoTimeoutNotice())


@lru_cache(maxsize=1)
def _math_verify() -> Any:
    import math_verify  # imported here: it pulls in SymPy and ANTLR (about a second)
    from sympy.utilities.exceptions import SymPyDeprecationWarning

    _quiet_math_verify()
    # Junk a policy writes ("7*(1,2)") makes SymPy warn about its own API; not our concern.
    warnings.filterwarnings("ignore", category=SymPyDeprecationWarning)
    return math_verify


_MAX_TERMS = 10_000
"""The most terms an answer may expand to: `(x+y+z+w)^{1000}` has some 10^8."""


def _cheap(value: Any) -> bool:
    """Whether comparing this parsed value stays cheap: no power tower, no huge power or
    factorial for SymPy to evaluate, no integral, sum, product or limit for it to work
    out (an answer is a value, not a computation), no power that expands to more than
    _MAX_TERMS terms, a bounded expression tree. A guard against what a policy can write
    on purpose, not a proof: comparing stays in this process, unbounded in time."""
    from sympy import (
        Basic,
        Derivative,
        Integral,
        Limit,
        Pow,
        Product,
        Sum,
        binomial,
        factorial,
        factorial2,
        gamma,
        preorder_traversal,
        subfactorial,
    )  # fmt: skip

    if not isinstance(value, Basic):
        return isinstance(value, str)
    for count, node in enumerate(preorder_traversal(value)):
        if count > _MAX_NODES or isinstance(node, (Integral, Sum, Product, Limit, Derivative)):
            return False
        if isinstance(node, Pow) and node.exp.is_number:
            e = node.exp
            if not e.is_Rational or abs(e.p) > _MAX_EXPONENT or e.q > _MAX_EXPONENT:
                return False
        if isinstance(node, (factorial, factorial2, subfactorial, binomial, gamma)):
            if any(a.is_number and not (a.is_Integer and abs(a) <= _MAX_FACTORIAL) for a in node.args):
                return False
    return _terms(value) <= _MAX_TERMS


def _terms(node: Any) -> float:
    """How many terms `node` has once multiplied out (an estimate, from above)."""
    import math

    from sympy import Add, Mul, Pow

    if isinstance(node, Add):
        return sum(_terms(arg) for arg in node.args)
    if isinstance(node, Mul):
        return math.prod(_terms(arg) for arg in node.args)
    if isinstance(node, Pow):
        base, e = _terms(node.base), node.exp
        if not (e.is_Integer and e > 0) or base <= 1:
            return base
        if base > _MAX_TERMS or e > _MAX_TERMS:
            return math.inf
        # A multinomial (t terms to the n-th power) has C(n + t - 1, t - 1) terms.
        terms = math.comb(int(e) + int(base) - 1, int(base) - 1)
        return float(terms) if terms <= _MAX_TERMS else math.inf
    return 1.0


def _is_value(value: Any) -> bool:
    """A number as written, not a computation: an integer or decimal, a fraction (`a/b`,
    `\\frac{a}{b}`), signed, or a percent. `12*7`, `3+4` and `2^{10}` are computations a
    policy could copy from the question ("12*7="), so against a numeric reference they
    are not answers."""
    from sympy import Integer, Mul, Number, Pow, Rational, UnevaluatedExpr

    if isinstance(value, Number):
        return True
    if isinstance(value, Pow):
        return bool(value.exp == -1) and isinstance(value.base, Integer)
    if not isinstance(value, Mul):
        return False
    kinds = {"number": 0, "inverse": 0, "percent": 0}
    for factor in value.args:
        if factor == -1:
            continue
        if isinstance(factor, Number):
            kinds["number"] += 1
        elif isinstance(factor, Pow) and _is_value(factor):
            kinds["inverse"] += 1
        elif isinstance(factor, UnevaluatedExpr) and factor.args[0] == Rational(1, 100):
            kinds["percent"] += 1
        else:
            return False
    return all(count <= 1 for count in kinds.values())


@lru_cache(maxsize=4096)
def _parse(text: str) -> tuple[Any, ...]:
    """math-verify's parse (LaTeX and plain): the SymPy value and its source text, or
    nothing when it reads no value or the value would be costly to compare."""
    mv = _math_verify()
    config = [mv.LatexExtractionConfig(), mv.ExprExtractionConfig()]
    parsed = mv.parse(text, extraction_config=config, parsing_timeout=None)
    return tuple(parsed) if all(_cheap(p) for p in parsed) and any(not isinstance(p, str) for p in parsed) else ()


@lru_cache(maxsize=4096)
def _parse_reference(reference: str) -> tuple[Any, ...]:
    """A reference is LaTeX (`\\frac12`, from a boxed solution) or plain (`1,234`)."""
    reference = normalize(reference).strip()
    return _parse(f"${reference}$") or _parse(reference)


def is_reference(reference: str) -> bool:
    """Whether math-verify reads this reference (one it cannot read is never matched)."""
    return bool(_INTEGER.fullmatch(reference.strip())) or bool(_parse_reference(reference))


@lru_cache(maxsize=4096)
def _matches(kind: str, answer: str, reference: str) -> bool:
    """math-verify's verdict on one answer: `boxed` content, `hashes` text or the whole `text`."""
    gold = _parse_reference(reference)
    if not gold:
        return False
    if kind == "boxed":
        parsed = _parse(f"\\boxed{{{answer}}}")
    else:
        parsed = _parse(answer)
    if kind == "text" and not _ends_with(parsed, answer):
        return False
    numeric = [g for g in gold if not isinstance(g, str)]
    if numeric and all(_is_value(g) for g in numeric):
        parsed = tuple(p for p in parsed if not isinstance(p, str) and _is_value(p))
    if not parsed:
        return False
    return bool(_math_verify().verify(list(gold), list(parsed), timeout_seconds=None))


def _ends_with(parsed: tuple[Any, ...], text: str) -> bool:
    """Whether what math-verify read from prose holds the text's last number: it may skip a
    tail it cannot parse and settle on an earlier number (`3)93(` read as 3), and a policy
    could fish with such tails. The last number stays the answer, as it always was here."""
    numbers = _NUMBER.findall(text)
    if not numbers:
        return True
    last = numbers[-1].replace(",", "").lstrip("-")
    return any(isinstance(p, str) and last in p.replace("{,}", "").replace(",", "") for p in parsed)


def final_answers(text: str) -> tuple[str, list[str]]:
    """(kind, answers): ("boxed", every boxed content), ("hashes", [the last `#### X`]) or
    ("text", [the completion's tail]); one empty answer when the completion has none."""
    text = normalize(text)
    boxed = boxed_answers(text)
    if boxed:
        return "boxed", [b.strip() for b in boxed]
    hashes = _HASHES.findall(text)
    if hashes:
        return "hashes", [hashes[-1].strip()]
    return "text", [text[-_MAX_TEXT_CHARS:].strip()]


def is_correct(completion: str, reference: str) -> bool:
    """Whether the completion's final answer equals the reference (every boxed one, if several)."""
    stripped, ref = completion.strip(), reference.strip()
    if _INTEGER.fullmatch(stripped) and _INTEGER.fullmatch(ref):
        return int(stripped) == int(ref)  # the fast path: exactly math-verify's verdict here
    kind, answers = final_answers(completion)
    if kind == "text":
        return _prose_is_correct(answers[0], reference)
    if not all(answers) or any(len(a) > _MAX_ANSWER_CHARS for a in answers):
        return False
    return all(_matches(kind, a, reference) for a in answers)


def _prose_is_correct(text: str, reference: str) -> bool:
    """Prose without a boxed or `####` answer: LaTeX in it is read by math-verify (and must
    hold the last number, so it is the final answer); otherwise the answer is the last
    number, as it always was here (math-verify alone would read junk such as `0017-+74`
    as 17, skipping what it cannot parse)."""
    if not text:
        return False
    if any(isinstance(p, str) and "\\" in p for p in _parse(text)):
        return _matches("text", text, reference)
    numbers = _NUMBER.findall(text)
    return bool(numbers) and _matches("hashes", numbers[-1], reference)


def answers_match(predicted: str | None, reference: str) -> bool:
    """Whether an already extracted answer equals the reference (None: no answer)."""
    return predicted is not None and is_correct(predicted, reference)


def is_well_formatted(text: str) -> bool:
    """The expected shapes: a bare number, a bare `$...$` expression, text with exactly one
    `\\boxed{X}`, or text with a `#### X` line, where X parses."""
    stripped = normalize(text).strip()
    if parse_number(stripped) is not None:
        return True
    if len(stripped) > _MAX_TEXT_CHARS:
        return False
    boxed = boxed_answers(stripped)
    if boxed:
        return len(boxed) == 1 and len(boxed[0]) <= _MAX_ANSWER_CHARS and bool(_parse(f"\\boxed{{{boxed[0]}}}"))
    if stripped.startswith("$") and stripped.endswith("$") and 2 < len(stripped) <= _MAX_ANSWER_CHARS:
        return bool(_parse(stripped))
    hashes = _HASHES.findall(stripped)
    final = hashes[-1].strip() if hashes else ""
    if not final:
        return False
    return parse_number(final) is not None or (len(final) <= _MAX_ANSWER_CHARS and bool(_parse(final)))
