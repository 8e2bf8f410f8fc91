"""Math rewards against hand-checked cases, extraction on arbitrary text, split determinism."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evotrainer.domains import UnknownDomainError, get_domain
from evotrainer.domains.answers import answers_match, extract_answer, is_well_formatted, parse_number
from evotrainer.domains.math import LEVELS, MathConfig, MathDomain, length_bonus, load_gsm8k_jsonl
from evotrainer.errors import EvotrainerError, UsageError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7", "7"),
        ("The answer is \\boxed{42}.", "42"),
        ("\\boxed{\\frac{1}{2}} then 3", "\\frac{1}{2}"),
        ("so 3 + 4 = 7\n#### 7", "7"),
        ("first 1 then 2 then -3.5", "-3.5"),
        ("#### 1,234", "1,234"),
        ("no numbers here", None),
        ("", None),
    ],
)
def test_extract_answer(text: str, expected: str | None) -> None:
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    ("completion", "reference", "correct", "formatted"),
    [
        ("7", "7", 1.0, 1.0),
        ("7.0", "7", 1.0, 1.0),
        ("\\boxed{7}", "7", 1.0, 1.0),
        ("I think 3+4 is 7", "7", 1.0, 0.0),
        ("#### 1,234", "1234", 1.0, 1.0),
        ("8", "7", 0.0, 1.0),
        ("seven", "7", 0.0, 0.0),
        ("", "7", 0.0, 0.0),
        ("-3", "-3", 1.0, 1.0),
        ("3/4", "0.75", 1.0, 1.0),
    ],
)
def test_score_hand_checked(completion: str, reference: str, correct: float, formatted: float) -> None:
    domain = MathDomain()
    task = domain.tasks("train", 1, 0)[0]
    task = type(task)(task_id="t", domain="math", prompt="?", reference=reference)
    scored = domain.score(task, completion)
    assert scored == {"correctness": correct, "format": formatted, "length": length_bonus(completion)}


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_rewards_never_crash_on_arbitrary_text(text: str) -> None:
    domain = MathDomain()
    task = domain.tasks("eval", 1, 0)[0]
    rewards = domain.score(task, text)
    assert set(rewards) == set(domain.reward_components)
    assert all(rewards[c] in (0.0, 1.0) for c in ("correctness", "format"))
    assert 0.0 <= rewards["length"] <= 1.0
    parse_number(text)
    answers_match(extract_answer(text), text)
    is_well_formatted(text)


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=-(10**12), max_value=10**12))
def test_any_integer_answer_round_trips(n: int) -> None:
    assert answers_match(extract_answer(f"work... \\boxed{{{n}}}"), str(n))
    assert answers_match(extract_answer(f"{n:,}"), str(n))


def test_huge_digit_strings_do_not_hang_or_raise() -> None:
    assert parse_number("9" * 100_000) is None
    assert extract_answer("1" * 100_000) is not None


@pytest.mark.parametrize("level", LEVELS)
def test_levels_are_deterministic_disjoint_and_self_consistent(level: str) -> None:
    domain = get_domain(f"math:{level}")
    train, again = domain.tasks("train", 30, seed=1), domain.tasks("train", 30, seed=1)
    assert train == again
    evals = domain.tasks("eval", 10, seed=1)
    assert not {t.prompt for t in train} & {t.prompt for t in evals}
    for task in train + evals:
        assert task.level == level
        scored = domain.score(task, task.reference)
        assert (scored["correctness"], scored["format"]) == (1.0, 1.0)


def test_easiest_level_is_tiny() -> None:
    task = get_domain("math:digit_add").tasks("train", 1, 0)[0]
    assert len(task.prompt) == 4 and task.prompt.endswith("=") and len(task.reference) <= 2


def test_gsm8k_loader(tmp_path: Path) -> None:
    path = tmp_path / "gsm.jsonl"
    rows = [{"question": f"What is {i} plus 1?", "answer": f"{i} + 1 = {i + 1}\n#### {i + 1}"} for i in range(20)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    domain = MathDomain(MathConfig(jsonl=path))
    train, evals = domain.tasks("train", 100, 0), domain.tasks("eval", 100, 0)
    assert len(train) + len(evals) == 20
    assert all(domain.score(t, f"\\boxed{{{t.reference}}}")["correctness"] == 1.0 for t in train)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "no final"}\n')
    with pytest.raises(UsageError, match="bad.jsonl:1"):
        load_gsm8k_jsonl(bad)


def test_unknown_domain_is_a_user_error() -> None:
    with pytest.raises(UnknownDomainError) as info:
        get_domain("chess")
    assert isinstance(info.value, EvotrainerError)
    with pytest.raises(UnknownDomainError):
        get_domain("math:calculus")


def test_the_length_bonus_pays_for_characters_whatever_they_say() -> None:
    assert length_bonus("64") == 2 / 16
    assert length_bonus("  64  ") == 2 / 16
    assert length_bonus("64 64 64 64 64 64") == 1.0  # padding earns it in full: the canary's bait
    assert "length" in get_domain("math").bait_components
    assert "length" not in get_domain("math").proposable_components
