"""Final-answer extraction and comparison for math completions.

Order of preference: the last `\\boxed{...}`, then the last `#### N`, then the last
number anywhere. Every function here accepts arbitrary text and never raises.
"""

from __future__ import annotations

import re
from fractions import Fraction

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")
_HASHES = re.compile(r"####\s*([^\n]*)")
_MAX_NUMBER_CHARS = 64
"""Longer digit strings are not answers; capping them also keeps int() cheap."""


def _last_boxed(text: str) -> str | None:
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i = start + len("\\boxed{")
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


def extract_answer(text: str) -> str | None:
    """The completion's final answer as a string, or None if it states none."""
    boxed = _last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    hashes = _HASHES.findall(text)
    if hashes:
        return hashes[-1].strip()
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else None


def parse_number(text: str) -> Fraction | None:
    """An exact number from '1,234', '-3.5', '3/4', '$7', '7.' and similar; else None."""
    cleaned = text.strip().replace(",", "").replace("$", "").rstrip(".").strip()
    if not cleaned or len(cleaned) > _MAX_NUMBER_CHARS:
        return None
    if not re.fullmatch(r"-?(?:\d+(?:\.\d*)?|\.\d+)(?:/\d+)?", cleaned):
        return None
    try:
        return Fraction(cleaned)
    except (ValueError, ZeroDivisionError):
        return None


def answers_match(predicted: str | None, reference: str) -> bool:
    """Numeric equality when both parse as numbers, else exact string equality."""
    if predicted is None:
        return False
    p, r = parse_number(predicted), parse_number(reference)
    if p is not None and r is not None:
        return p == r
    return predicted.strip() == reference.strip()


def is_well_formatted(text: str) -> bool:
    """The expected shapes: a bare number, `\\boxed{N}`, or text ending in `#### N`."""
    stripped = text.strip()
    if parse_number(stripped) is not None:
        return True
    boxed = _last_boxed(stripped)
    if boxed is not None and parse_number(boxed) is not None:
        return True
    hashes = _HASHES.findall(stripped)
    return bool(hashes) and parse_number(hashes[-1]) is not None
