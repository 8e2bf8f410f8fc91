"""`swe:tiny`: generated two-file repositories, compact actions run by the swe environment,
graded in the real sandbox."""

from __future__ import annotations

import pytest

from evotrainer.domains import get_domain
from evotrainer.domains.swe.compact import OPERATORS, actions_of, tool_call


@pytest.fixture(scope="module")
def domain():  # type: ignore[no-untyped-def]
    return get_domain("swe:tiny")


def test_splits_are_seeded_and_disjoint(domain) -> None:  # type: ignore[no-untyped-def]
    train, held_out = domain.tasks("train", 300, 0), domain.tasks("eval", 300, 0)
    assert not {t.prompt for t in train} & {t.prompt for t in held_out}
    assert len({t.prompt for t in held_out}) == 300
    assert [t.prompt for t in domain.tasks("eval", 20, 0)] == [t.prompt for t in held_out[:20]]
    assert [t.prompt for t in domain.tasks("eval", 20, 1)] != [t.prompt for t in held_out[:20]]
    assert domain.task_by_id(held_out[7].task_id) == held_out[7]


def test_the_reference_episode_fixes_the_bug_and_other_operators_do_not(domain) -> None:  # type: ignore[no-untyped-def]
    for task in domain.tasks("eval", 3, 0):
        episode = domain.replay(task, task.reference)
        assert episode.rewards["correctness"] == 1.0, task.reference
        assert [c.tool for c in episode.tool_calls] == ["read_file", "edit", "run_tests", "submit"]
        assert episode.metrics["self_tested"] == 1.0 and episode.metrics["edited_bug_file"] == 1.0
        problem = task.metadata["problem"]
        wrong = next(op for op in OPERATORS if f" {op} " in problem.files[problem.bug_file])
        for other in sorted(set(OPERATORS) - {wrong}):
            attempt = f"edit {problem.bug_file}|{wrong}|{other}\n$ done"
            solved = domain.score(task, attempt)["correctness"]
            assert solved == float(f"edit {problem.bug_file}|{wrong}|{other}" in task.reference), attempt


def test_editing_the_tests_is_tampering_and_earns_nothing(domain) -> None:  # type: ignore[no-untyped-def]
    task = domain.tasks("train", 1, 0)[0]
    test_file = next(p for p in task.metadata["problem"].files if p.startswith("tests/"))
    details = domain.score_details(task, f"edit {test_file}|==|!=\n$ test\n$ done")
    assert details["tampering"] == 1 and details["tampered_files"] == [test_file]
    assert set(details["rewards"].values()) == {0.0}


def test_compact_actions_are_the_environments_tool_calls() -> None:
    assert tool_call("cat calc.py") == '{"tool": "read_file", "path": "calc.py"}'
    assert '"search": "a - b"' in tool_call("edit calc.py|a - b|a + b")
    assert tool_call("rm -rf /") == "rm -rf /"  # not an action: the environment counts a parse failure
    # Only the policy's lines are actions: a file line that looks like a prompt mark is shown indented.
    assert actions_of("cat x.py\n$ y\n $ z\n$ done") == ["cat x.py", "y", "done"]
