"""`evotrainer domains score`: given completions scored with the domain's real reward (code
in the real sandbox), the total as training weighs it, and bad input refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evotrainer.cli import main
from evotrainer.domains import get_domain
from evotrainer.domains.base import Domain, Task
from evotrainer.domains.scoring import read_completions, score_all
from evotrainer.harness.spec import HarnessSpec
from evotrainer.sandbox.namespaces import available
from tests.conftest import IN_CI
from tests.domains.test_files import CODE_ROWS, MATH_ROWS, write_jsonl
from tests.test_cli import run

needs_sandbox = pytest.mark.skipif(bool(available()) and not IN_CI, reason=available() or "sandbox available")


def score(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["domains", "score", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_math_file_scores_every_component_and_the_weighted_total(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = write_jsonl(tmp_path / "math.jsonl", MATH_ROWS)
    answers = write_jsonl(tmp_path / "answers.jsonl", [
        {"task_id": "gsm-1", "completion": "\\boxed{\\frac{84}{2}}"},
        {"task_id": "test/algebra/1.json", "completion": "$\\dfrac{1}{2}$"},
        {"task_id": "7", "completion": "\\boxed{1{,}234}"},
        {"task_id": "math/file/math/4", "completion": "\u22127 degrees"},
        {"task_id": "gsm-1", "completion": "I think 142"},
    ])  # fmt: skip
    code, out, err = score(capsys, f"math:file={data}", "--completions", str(answers), "--json",
                           "--weight", "format=0.5")  # fmt: skip
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["task_id"], r["reward"]) for r in rows] == [
        ("gsm-1", 1.5), ("test/algebra/1.json", 1.5), ("7", 1.5), ("math/file/math/4", 1.0), ("gsm-1", 0.0)]
    assert {c: rows[3]["components"][c] for c in ("correctness", "format")} == {"correctness": 1.0, "format": 0.0}
    assert 0.0 < rows[3]["components"]["length"] <= 1.0  # reported, unweighted
    code, out, _ = score(capsys, f"math:file={data}", "--completions", str(answers))
    assert code == 0
    header, first = out.splitlines()[:2]
    assert header.split() == ["task_id", "reward", "correctness", "format", "length"]
    assert first.split()[:4] == ["gsm-1", "1", "1", "1"]
    assert "5 completions, mean reward 0.8" in out


def test_generated_ids_name_split_seed_and_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tasks = get_domain("math:column_add").tasks("eval", 3, seed=4)
    answers = write_jsonl(tmp_path / "a.jsonl", [{"task_id": t.task_id, "completion": t.reference} for t in tasks])
    code, out, err = score(capsys, "math:column_add", "--completions", str(answers), "--json")
    assert code == 0, err
    assert [json.loads(line)["task_id"] for line in out.splitlines()] == [t.task_id for t in tasks]
    assert all(json.loads(line)["reward"] == 1.0 for line in out.splitlines())


@needs_sandbox
def test_code_file_runs_in_the_sandbox(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = write_jsonl(tmp_path / "apps.jsonl", CODE_ROWS)
    answers = write_jsonl(tmp_path / "answers.jsonl", [
        {"task_id": "sum-two", "completion": "a, b = map(int, input().split())\nprint(a + b)\n"},
        {"task_id": "sum-two", "completion": "print(3)\n"},  # right on the first test only
        {"task_id": "code/file/apps/12", "completion": "```python\nprint(input())\n```"},
        {"task_id": "code/file/apps/12", "completion": "import sys; sys.exit(0)"},
    ])  # fmt: skip
    code, out, err = score(capsys, f"code:file={data}", "--completions", str(answers), "--json",
                           "--weight", "pass_fraction=0.5")  # fmt: skip
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["reward"] for r in rows] == [1.5, 0.25, 1.5, 0.0]
    assert rows[1]["components"] == {"correctness": 0.0, "pass_fraction": 0.5, "compile": 1.0, "format": 1.0}


class _Detailed(Domain):
    """A domain whose grade has details, as SWE's has per-test statuses and tampering."""

    name = "detailed"
    reward_components = ("correctness",)

    def tasks(self, split: str, n: int, seed: int) -> list[Task]:  # type: ignore[override]
        return [Task(f"detailed/{split}/{seed}/{i}", "detailed", "?") for i in range(n)]

    def score(self, task: Task, completion: str) -> dict[str, float]:
        return {"correctness": float(completion == "fix")}

    def score_with_details(self, task: Task, completion: str) -> tuple[dict[str, float], dict[str, object]]:
        status = "passed" if completion == "fix" else "failed"
        return self.score(task, completion), {"tests": {"t.py::a": status}, "tampering": int(completion == "hack")}


def test_details_travel_with_the_scores(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from evotrainer.cli.domains import _print_scores

    answers = write_jsonl(tmp_path / "a.jsonl", [{"task_id": "detailed/eval/0/1", "completion": c} for c in ("fix", "hack")])
    domain = _Detailed()
    rows = score_all(domain, HarnessSpec().to_grpo_settings(), read_completions(answers, domain))
    assert rows[1] == {"task_id": "detailed/eval/0/1", "reward": 0.0, "components": {"correctness": 0.0},
                       "tests": {"t.py::a": "failed"}, "tampering": 1}  # fmt: skip
    _print_scores(rows, domain.reward_components)
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["task_id", "reward", "correctness", "tampering"] and out[2].split()[-1] == "1"
    assert out[4].split() == ["task_id", "test", "status"] and out[6].split() == ["detailed/eval/0/1", "t.py::a", "failed"]


@pytest.mark.parametrize(
    ("lines", "domain", "message"),
    [
        (['{"task_id": "nope", "completion": "1"}'], "file", "answers.jsonl:1: no task 'nope' in domain math"),
        (['{"task_id": "gsm-1", "completion": "42"}', '{"task_id": "gsm-1", "completion": '],
         "file", "answers.jsonl:2: not JSON"),
        (['{"task_id": "gsm-1"}'], "file", 'answers.jsonl:1: "completion" must be a string'),
        (['["gsm-1", "42"]'], "file", "answers.jsonl:1: want"),
        (['{"task_id": "math/train/0/100000", "completion": "1"}'], "math", "no task 'math/train/0/100000'"),
        (['{"task_id": "code/train/0/1", "completion": "1"}'], "math", "no task 'code/train/0/1'"),
        ([], "chess", "unknown domain 'chess'"),
        ([], "math:file=/nowhere.jsonl", "/nowhere.jsonl: no such file"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_no_scores(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], lines: list[str], domain: str, message: str
) -> None:
    data = write_jsonl(tmp_path / "math.jsonl", MATH_ROWS)
    answers = write_jsonl(tmp_path / "answers.jsonl", lines)
    name = f"math:file={data}" if domain == "file" else domain
    code, out, err = score(capsys, name, "--completions", str(answers))
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err, err


def test_a_missing_completions_file_and_bad_weights(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for args, message in [
        (["--completions", str(tmp_path / "none.jsonl")], "none.jsonl: no such file"),
        (["--completions", str(tmp_path), "--weight", "format"], "use COMPONENT=NUMBER"),
        (["--completions", str(tmp_path), "--weight", "speed=1"], "['speed'] are not reward components"),
    ]:
        code, out, err = score(capsys, "math", *args)
        assert code == 2 and out == "" and err.count("\n") == 1 and message in err, err


def test_the_total_is_the_branch_harness_reward(cli_env: dict[str, str], tmp_path: Path) -> None:
    assert run(cli_env, "experiment", "create", "w", "--domain", "math").returncode == 0
    spec = {"rewards": {"weights": {"correctness": 1.0, "format": 0.25}}}
    assert run(cli_env, "harness", "record", "w/main", "--spec", json.dumps(spec)).returncode == 0
    task = get_domain("math:digit_add").tasks("train", 1, 0)[0]
    answers = write_jsonl(tmp_path / "a.jsonl", [{"task_id": task.task_id, "completion": task.reference}])
    result = run(cli_env, "domains", "score", "math:digit_add", "--completions", str(answers), "--json",
                 "--harness", "w/main")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["reward"] == 1.25
