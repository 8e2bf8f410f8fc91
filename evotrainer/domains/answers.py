"""Math answers: which part of a completion is its final answer, and whether it is right.

Equality is Hugging Face's `math-verify` (what TRL and open-r1 check math with): the
reference and the answer are parsed (LaTeX or plain text) into SymPy and compared, so
`\\boxed{\\frac{84}{2}}` is 42, `$\\dfrac{1}{2}$` is 1/2 (never 2), `\\boxed{1{,}234}` is 1234.
On top of it, the project's own rules:
- The final answer is every `\\boxed{...}` if there is one (all of them must be right:
  boxing several candidates is hedging, not answering), else the last `#### X`, else what
  math-verify finds in the text (an "answer is" phrase, else the last expression).
- Unicode minus signs (U+2212, ...) are minus signs: "−7 degrees" is -7, never 7.
- Format: the completion is a bare number, a bare `$...$` expression, text with exactly
  one `\\boxed{X}`, or text ending in `#### X`, where X parses.
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
    """The contents of every `\\boxed{...}` (or `\\fbox{...}`) with balanced braces, in order."""
    out = []
    for match in _BOXED.finditer(text):
        depth, i = 1, match.end()
        for j in range(i, len(text)):
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
                if depth == 0:
                    out.append(text[i:j])
                    break
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

    _quiet_math_verify()
    return math_verify


def _cheap(value: Any) -> bool:
    """Whether comparing this parsed value stays cheap: no power tower, no huge power or
    factorial for SymPy to evaluate, a bounded expression tree."""
    from sympy import Basic, Pow, binomial, factorial, factorial2, gamma, preorder_traversal, subfactorial

    if not isinstance(value, Basic):
        return isinstance(value, str)
    for count, node in enumerate(preorder_traversal(value)):
        if count > _MAX_NODES:
            return False
        if isinstance(node, Pow) and node.exp.is_number:
            e = node.exp
            if not e.is_Rational or abs(e.p) > _MAX_EXPONENT or e.q > _MAX_EXPONENT:
                return False
        if isinstance(node, (factorial, factorial2, subfactorial, binomial, gamma)):
            if any(a.is_number and not (a.is_Integer and abs(a) <= _MAX_FACTORIAL) for a in node.args):
                return False
    return True


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
    if not parsed:
        return False
    return bool(_math_verify().verify(list(gold), list(parsed), timeout_seconds=None))


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
    if not all(answers) or any(len(a) > _MAX_ANSWER_CHARS for a in answers):
        return False
    return all(_matches(kind, a, reference) for a in answers)


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
