"""Datasets from files wherever a domain name is read: `math:file=PATH`, `code:file=PATH`,
their ids, `split=all`, and bad files refused with file:line (in Python, the CLI and
experiment files)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from evotrainer.domains import UnknownDomainError, get_domain, with_file_relative_to
from evotrainer.domains.splits import split_of
from evotrainer.errors import UsageError
from evotrainer.evolve.experiment_config import ExperimentConfig
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore
from tests.test_cli import EVOTRAINER, run

MATH_ROWS = [
    {"id": "gsm-1", "question": "Tom has 40 apples and buys 2 more. How many?", "answer": "40 + 2 = 42\n#### 42"},
    {"unique_id": "test/algebra/1.json", "problem": "Half of 1?", "solution": "It is $\\boxed{\\frac{1}{2}}$."},
    {"task_id": 7, "problem": "1000 + 234?", "answer": "1,234"},
    {"question": "What is 3 - 10?", "answer": "-7"},
]
CODE_ROWS = [
    {"id": "sum-two", "question": "Print the sum of two integers.",
     "input_output": json.dumps({"inputs": ["1 2\n", "5 7\n"], "outputs": ["3\n", "12\n"]})},
    {"problem_id": 12, "description": "Echo the line.", "public_tests": {"input": ["hi\n"], "output": ["hi\n"]}},
]  # fmt: skip


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_math_file_shapes_ids_and_references(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "mixed.jsonl", MATH_ROWS)
    domain = get_domain(f"math:file={path},split=all")
    tasks = domain.tasks("eval", 10, seed=3)
    assert [(t.task_id, t.reference) for t in tasks] == [
        ("gsm-1", "42"), ("test/algebra/1.json", "\\frac{1}{2}"), ("7", "1,234"), ("math/file/mixed/4", "-7")]
    assert domain.tasks("train", 2, seed=0) == tasks[:2]  # split=all: every split is the whole file, in order
    for task, right, wrong in zip(tasks, ["42", "$\\dfrac{1}{2}$", "\\boxed{1{,}234}", "\u22127"],
                                  ["142", "2", "234", "7"], strict=True):  # fmt: skip
        assert domain.score(task, right)["correctness"] == 1.0, (task.task_id, right)
        assert domain.score(task, wrong)["correctness"] == 0.0, (task.task_id, wrong)
    assert domain.task_by_id("test/algebra/1.json") == tasks[1] and domain.task_by_id("math/train/0/0") is None


def test_the_hash_split_of_a_file_is_the_documented_rule(tmp_path: Path) -> None:
    rows = [{"id": f"q{i}", "question": f"What is {i} plus 1?", "answer": f"#### {i + 1}"} for i in range(40)]
    domain = get_domain(f"math:file={write_jsonl(tmp_path / 'g.jsonl', rows)}")
    train, evals = domain.tasks("train", 100, 0), domain.tasks("eval", 100, 0)
    assert len(train) + len(evals) == 40 and not {t.task_id for t in train} & {t.task_id for t in evals}
    assert all(split_of(t.prompt) == "eval" for t in evals) and all(split_of(t.prompt) == "train" for t in train)


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([MATH_ROWS[0], "{not json"], "bad.jsonl:2: not a GSM8K/MATH-style line"),
        ([{"question": "q", "answer": "no final answer given"}], "bad.jsonl:1: not a GSM8K/MATH-style line"),
        ([{"problem": "q", "solution": "no box here"}], "bad.jsonl:1"),
        ([{"answer": "#### 3"}], 'bad.jsonl:1: not a GSM8K/MATH-style line: no "question" or "problem"'),
        ([MATH_ROWS[0], MATH_ROWS[0]], "bad.jsonl:2: task id 'gsm-1' already used on line 1"),
        ([[1, 2]], "bad.jsonl:1"),
        ([], "bad.jsonl: no problems"),
    ],
)
def test_a_bad_math_file_names_file_and_line(tmp_path: Path, rows: list[object], message: str) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        get_domain(f"math:file={path}")


def test_code_file_ids_split_all_and_bad_lines(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "apps.jsonl", CODE_ROWS)
    domain = get_domain(f"code:file={path},split=all")
    tasks = domain.tasks("train", 5, 0)
    assert [t.task_id for t in tasks] == ["sum-two", "code/file/apps/12"]
    assert domain.task_by_id("sum-two") == tasks[0]
    assert len(get_domain(f"code:file={path}").tasks("train", 5, 0) + get_domain(f"code:file={path}").tasks(
        "eval", 5, 0)) == 2  # fmt: skip
    for rows, message in [
        ([CODE_ROWS[0], "[1"], "apps.jsonl:2: not an APPS/CodeContests-style line"),
        ([{"id": "x", "question": "q"}], "apps.jsonl:1: problem has no tests"),
        ([{"id": "x", "input_output": "{}"}], "apps.jsonl:1: not an APPS/CodeContests-style line \\(no 'description'"),
        ([CODE_ROWS[0], CODE_ROWS[0]], "apps.jsonl:2: task id 'sum-two' already used"),
    ]:
        write_jsonl(path, rows)
        with pytest.raises(UsageError, match=message):
            get_domain(f"code:file={path}")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("math:file=/nowhere/x.jsonl", "/nowhere/x.jsonl: no such file"),
        ("code:file=/nowhere/x.jsonl", "/nowhere/x.jsonl: no such file"),
        ("math:file={dir}", "is a directory"),
        ("math:file={file},split=some", "split=some"),
        ("math:file={file},repos=/r", "unknown option\\(s\\) repos"),
        ("math:digit_add,file={file}", "variants cannot follow a file"),
        ("math:split=all", "no file=PATH"),
        ("math:file=", "bad option"),
    ],
)
def test_bad_file_names_are_one_clear_error(tmp_path: Path, name: str, message: str) -> None:
    file = write_jsonl(tmp_path / "ok.jsonl", MATH_ROWS)
    with pytest.raises(UsageError, match=message):
        get_domain(name.format(dir=tmp_path, file=file))
    assert issubclass(UnknownDomainError, UsageError)


def test_an_experiment_file_names_a_dataset_relative_to_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "data").mkdir()
    write_jsonl(tmp_path / "data" / "gsm.jsonl", MATH_ROWS)
    toml = tmp_path / "exp.toml"
    toml.write_text('name = "gsm"\ndomain = "math:file=data/gsm.jsonl,split=all"\n')
    monkeypatch.chdir("/")  # a relative path means the same file wherever the run starts
    config = ExperimentConfig.load(toml)
    assert config.domain == f"math:file={tmp_path / 'data' / 'gsm.jsonl'},split=all"
    assert [t.task_id for t in get_domain(config.domain).tasks("eval", 2, 0)] == ["gsm-1", "test/algebra/1.json"]
    assert with_file_relative_to("math:column_add", tmp_path) == "math:column_add"
    toml.write_text('name = "gsm"\ndomain = "math:file=data/missing.jsonl"\n')
    with pytest.raises(UsageError, match="missing.jsonl: no such file"):
        get_domain(ExperimentConfig.load(toml).domain)


def test_the_cli_takes_a_file_wherever_it_takes_a_domain(
    cli_env: dict[str, str], store: EventStore, tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "gsm.jsonl", MATH_ROWS)
    bad = write_jsonl(tmp_path / "bad.jsonl", [MATH_ROWS[0], "{oops"])
    # With a broker configured the CLI only requests the task: the request names the file.
    env = {**cli_env, "EVOTRAINER_BROKER_URL": "redis://127.0.0.1:1/0"}
    assert run(env, "experiment", "create", "f", "--domain", "math").returncode == 0
    result = run(env, "evaluate", "f/main", "--domain", f"math:file={path},split=all", "--k", "1", "--tasks", "4")
    assert result.returncode == 0 and result.stdout.startswith("requested evaluate task"), result.stderr
    before = len(store.read_branch(BranchRef("f", "main")))
    for command in ("evaluate", "train"):
        refused = run(env, command, "f/main", "--domain", f"math:file={bad}")
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
        assert "bad.jsonl:2: not a GSM8K/MATH-style line" in refused.stderr
    assert len(store.read_branch(BranchRef("f", "main"))) == before  # nothing recorded
    relative = subprocess.run([EVOTRAINER, "evaluate", "f/main", "--domain", "math:file=gsm.jsonl"], env=env,
                              cwd=tmp_path, capture_output=True, text=True, check=False)  # fmt: skip
    assert relative.returncode == 0, relative.stderr
    requested = [e.payload["inputs"] for e in store.read_branch(BranchRef("f", "main")) if e.type == "TaskRequested"]
    assert requested[0]["domain"] == f"math:file={path},split=all"
    assert requested[1]["domain"] == f"math:file={path}"  # recorded absolute: a worker may start elsewhere
    sampled = run(cli_env, "domains", "sample", f"math:file={path},split=all", "--n", "4", "--json")
    assert [row["task_id"] for row in json.loads(sampled.stdout)][:2] == ["gsm-1", "test/algebra/1.json"]
