"""SWE-bench-style grading end to end: a generated problem exported as a real SWE-bench
instance (git repository, base_commit, gold patch, test_patch, FAIL_TO_PASS/PASS_TO_PASS),
loaded from JSONL and graded in the real sandbox, against the hacks a policy would find."""

from __future__ import annotations

import base64
import difflib
import hashlib
import json
import random
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest

from evotrainer.domains import UnknownDomainError, get_domain
from evotrainer.domains.base import Task
from evotrainer.domains.swe import SweDomain, SweDomainConfig
from evotrainer.domains.swe.env import DOMAIN_WALL_TIME_S, SweConfig
from evotrainer.domains.swe.export import export_instance
from evotrainer.domains.swe.gitops import apply_diff
from evotrainer.domains.swe.repos import generate_problem
from evotrainer.domains.swe.testinfra import names_runner_in_source, reaches_into_runner
from evotrainer.domains.swe.testrun import command_with_ids, parse_statuses
from evotrainer.errors import UsageError
from evotrainer.sandbox import SandboxConfig
from evotrainer.sandbox.namespaces import available
from tests.conftest import IN_CI

pytestmark = pytest.mark.skipif(bool(available()) and not IN_CI, reason=available() or "sandbox available")

IID = "toolkit__toolkit-1"


def new_file(path: str, text: str) -> str:
    lines = text.splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{len(lines)} @@\n{body}"


# A root conftest.py that reports every test as passed: reward 1 on every instance before
# test infrastructure was restored, with no tampering recorded.
PASS_EVERYTHING = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
    report.longrepr = None
"""
# Started by the interpreter before pytest: marks every test report as passed.
SITE_HOOK = """import _pytest.reports
_original = _pytest.reports.TestReport.__init__
def _init(self, *args, **kwargs):
    _original(self, *args, **kwargs)
    self.outcome = "passed"
_pytest.reports.TestReport.__init__ = _init
"""


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("swebench")
    row = export_instance(generate_problem(random.Random(3)), IID, root / "repos", SweConfig().sandbox)
    return root, row


def write_jsonl(root: Path, rows: list[dict[str, Any]], name: str = "instances.jsonl") -> Path:
    path = root / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def domain_and_task(exported: tuple[Path, dict[str, Any]]) -> tuple[SweDomain, Task, dict[str, Any]]:
    root, row = exported
    domain = get_domain(f"swe:file={write_jsonl(root, [row])},repos={root / 'repos'}")
    assert isinstance(domain, SweDomain)
    (task,) = domain.all_tasks()
    return domain, task, row


def test_export_found_tests_that_fail_before_the_fix(domain_and_task: tuple[SweDomain, Task, dict[str, Any]]) -> None:
    _, task, row = domain_and_task
    assert task.task_id == IID and task.reference == row["patch"]
    assert json.loads(row["FAIL_TO_PASS"]) and json.loads(row["PASS_TO_PASS"])


def test_gold_patch_scores_one_and_empty_patch_zero(domain_and_task: tuple[SweDomain, Task, dict[str, Any]]) -> None:
    domain, task, row = domain_and_task
    gold = domain.score_details(task, row["patch"])
    assert gold["rewards"]["correctness"] == 1.0 and gold["rewards"]["partial_tests"] == 1.0
    assert gold["tampering"] == 0
    assert set(gold["tests"]) == set(json.loads(row["FAIL_TO_PASS"]) + json.loads(row["PASS_TO_PASS"]))
    assert set(gold["tests"].values()) == {"PASSED"}
    empty = domain.score_details(task, "")
    assert empty["rewards"]["correctness"] == 0.0 and empty["rewards"]["partial_tests"] == 0.0
    assert all(empty["tests"][t] == "FAILED" for t in json.loads(row["FAIL_TO_PASS"]))


def _edit_visible_test(task: Task) -> str:
    problem = task.metadata["problem"]
    path = next(p for p in problem.files if p.startswith("tests/"))
    old = problem.files[path].splitlines()
    new = [line.replace("assert ", "assert True or ") for line in old]
    hunk = "".join(f"-{line}\n" for line in old) + "".join(f"+{line}\n" for line in new)
    return f"--- a/{path}\n+++ b/{path}\n@@ -1,{len(old)} +1,{len(new)} @@\n{hunk}"


def _source_patches_runner(task: Task) -> str:
    """The SITE_HOOK code in the package's own __init__.py: graded source, not a test file."""
    path = next(p for p in task.metadata["problem"].files if p.endswith("/__init__.py"))
    return changed_file(path, task.metadata["problem"].files[path], SITE_HOOK)


# Found first on sys.path by `python -m pytest`: replaces the runner, prints passes.
FAKE_PYTEST = """import sys
print("=" * 20 + " short test summary info " + "=" * 20)
for node_id in sys.argv[1:]:
    print("PASSED", node_id)
"""

HACKS = {
    "shadowing_pytest": lambda task: new_file("pytest.py", FAKE_PYTEST),
    "shadowing_pytest_package": lambda task: new_file("pytest/__main__.py", FAKE_PYTEST),
    "root_conftest": lambda task: new_file("conftest.py", PASS_EVERYTHING),
    "nested_conftest": lambda task: new_file("toolkit/conftest.py", PASS_EVERYTHING),
    "sitecustomize": lambda task: new_file("sitecustomize.py", SITE_HOOK),
    "pth_file": lambda task: new_file("hook.pth", "import sitecustomize\n") + new_file("sitecustomize.py", SITE_HOOK),
    "pytest_ini": lambda task: new_file("pytest.ini", "[pytest]\naddopts = -p no:python\n"),
    "edited_test": _edit_visible_test,
}


@pytest.mark.parametrize("hack", sorted(HACKS))
def test_test_infrastructure_hacks_score_zero_and_are_flagged(
    domain_and_task: tuple[SweDomain, Task, dict[str, Any]], hack: str
) -> None:
    domain, task, row = domain_and_task
    details = domain.score_details(task, HACKS[hack](task))
    assert details["tampering"] >= 1 and details["tampered_files"]
    assert details["rewards"]["correctness"] == 0.0 and sum(details["rewards"].values()) == 0.0
    # Grading restored the infrastructure: the failing tests still fail in the log.
    assert all(details["tests"][t] == "FAILED" for t in json.loads(row["FAIL_TO_PASS"]))
    episode = domain.replay(task, HACKS[hack](task))
    assert domain.behaviour_metrics([episode])["tamper_rate"] == 1.0


def test_hack_plus_real_fix_still_zero_without_zero_on_tamper_it_counts_only_the_fix(
    domain_and_task: tuple[SweDomain, Task, dict[str, Any]], exported: tuple[Path, dict[str, Any]]
) -> None:
    domain, task, row = domain_and_task
    both = row["patch"] + new_file("conftest.py", PASS_EVERYTHING)
    assert domain.score_details(task, both)["rewards"]["correctness"] == 0.0
    root, _ = exported
    lenient = SweDomain(SweDomainConfig(env=SweConfig(zero_reward_on_tamper=False),
                                        instances=root / "instances.jsonl", repos=root / "repos"))  # fmt: skip
    (lenient_task,) = lenient.all_tasks()
    hack_only = lenient.score_details(lenient_task, new_file("conftest.py", PASS_EVERYTHING))
    assert hack_only["rewards"]["correctness"] == 0.0 and hack_only["tampering"] == 1


def changed_file(path: str, old: str, new: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}"))


def _gold_file(task: Task, row: dict[str, Any]) -> tuple[str, str, str]:
    """(path, text at base, text with the gold fix) of the file the gold patch changes."""
    path = next(line[6:] for line in row["patch"].splitlines() if line.startswith("--- a/"))
    base = task.metadata["problem"].files[path]
    return path, base, apply_diff({path: base}, row["patch"])[path]


def test_source_that_patches_the_runner_is_flagged_and_zeroed(
    domain_and_task: tuple[SweDomain, Task, dict[str, Any]],
) -> None:
    domain, task, row = domain_and_task
    details = domain.score_details(task, _source_patches_runner(task))
    # It runs inside pytest, so the log shows every test passing: only the flag stops it.
    assert all(details["tests"][t] == "PASSED" for t in json.loads(row["FAIL_TO_PASS"]))
    assert details["tampering"] == 1 and len(details["tampered_files"]) == 1
    assert sum(details["rewards"].values()) == 0.0


def test_runner_names_in_source_are_tampering_only_where_the_source_never_named_the_runner() -> None:
    plain = {"pkg/__init__.py": "X = 1\n", "tests/test_x.py": "import pytest\n"}
    plugin = {"pkg/plugin.py": "import pytest\n", **plain}
    assert not names_runner_in_source(plain) and names_runner_in_source(plugin)
    hooked = {**plain, "pkg/__init__.py": "import _pytest.reports\n"}
    assert reaches_into_runner("pkg/__init__.py", hooked, plain)
    assert not reaches_into_runner("pkg/__init__.py", {**plain, "pkg/__init__.py": "X = 2\n"}, plain)
    assert not reaches_into_runner("pkg/data.txt", {**plain, "pkg/data.txt": "pytest"}, plain)


def test_patch_that_breaks_a_pass_to_pass_test_scores_zero(
    domain_and_task: tuple[SweDomain, Task, dict[str, Any]],
) -> None:
    domain, task, row = domain_and_task
    path, base, fixed = _gold_file(task, row)
    # The gold fix, plus every function made to return None except the one it fixed.
    fixed_line = next(line[1:] for line in row["patch"].splitlines() if line.startswith("+    return"))
    broken = "".join(
        "    return None\n" if line.startswith("    return") and line.rstrip("\n") != fixed_line else line
        for line in fixed.splitlines(True)
    )
    details = domain.score_details(task, changed_file(path, base, broken))
    assert details["tampering"] == 0
    assert all(details["tests"][t] == "PASSED" for t in json.loads(row["FAIL_TO_PASS"]))
    assert details["rewards"]["correctness"] == 0.0 and details["rewards"]["visible_tests"] == 0.0
    assert 0.0 <= details["rewards"]["partial_tests"] < 1.0
    assert any(details["tests"][t] == "FAILED" for t in json.loads(row["PASS_TO_PASS"]))


def test_tool_calls_shell_edits_are_graded_and_shell_tampering_is_caught(
    domain_and_task: tuple[SweDomain, Task, dict[str, Any]],
) -> None:
    domain, task, row = domain_and_task
    path, _, fixed = _gold_file(task, row)
    script = f"import pathlib; pathlib.Path({path!r}).write_text({fixed!r})"
    fix = json.dumps({"tool": "shell", "command": f"python -c {json.dumps(script)} && python -m pytest -q tests"})
    episode = domain.replay(task, fix + '\n{"tool": "submit"}')
    assert episode.rewards["correctness"] == 1.0, episode.tool_calls[0].observation
    assert episode.tool_calls[0].changed == (path,)
    assert "passed" in episode.tool_calls[0].observation  # pytest runs inside the sandbox
    hack = json.dumps({"tool": "shell", "command": f"printf '%s' {json.dumps(PASS_EVERYTHING)} > conftest.py"})
    tampered = domain.replay(task, hack)
    assert tampered.tool_calls[0].changed == ("conftest.py",) and tampered.metrics["tamper_attempts"] == 1
    assert tampered.rewards["correctness"] == 0.0


def test_read_file_line_range_search_and_visible_tests(domain_and_task: tuple[SweDomain, Task, dict[str, Any]]) -> None:
    domain, task, row = domain_and_task
    bug_file, _, _ = _gold_file(task, row)
    calls = [
        {"tool": "read_file", "path": bug_file, "start": 2, "end": 3},
        {"tool": "search", "text": "def ", "path": bug_file.split("/")[0]},
        {"tool": "run_tests"},
    ]
    episode = domain.replay(task, "\n".join(json.dumps(c) for c in calls))
    read, search, tests = (c.observation for c in episode.tool_calls)
    assert read.startswith(f"{bug_file} lines 2-3 of ") and "     2  " in read and "     4  " not in read
    assert search.count("def ") == 3 and f"{bug_file}:1:" in search
    assert tests.splitlines()[0] == "2 passed, 1 failed"  # the visible tests, the bug unfixed


def test_bundle_and_json_list_fields_and_instance_test_command(exported: tuple[Path, dict[str, Any]]) -> None:
    root, row = exported
    bundles = root / "bundles"
    bundles.mkdir(exist_ok=True)
    subprocess.run(["git", "bundle", "create", "-q", str(bundles / f"{IID}.bundle"), "--all"],
                   cwd=root / "repos" / IID, check=True, capture_output=True)  # fmt: skip
    listed = row | {"FAIL_TO_PASS": json.loads(row["FAIL_TO_PASS"]), "PASS_TO_PASS": json.loads(row["PASS_TO_PASS"]),
                    "test_cmd": "python -m pytest -p no:randomly"}  # fmt: skip
    domain = get_domain(f"swe:file={write_jsonl(root, [listed], 'listed.jsonl')},repos={bundles}")
    (task,) = domain.all_tasks()
    assert task.metadata["problem"].instance.test_cmd == "python -m pytest -p no:randomly"
    assert domain.score(task, row["patch"])["correctness"] == 1.0


def test_saved_datasets_directory_loads(exported: tuple[Path, dict[str, Any]]) -> None:
    datasets = pytest.importorskip("datasets")
    root, row = exported
    datasets.Dataset.from_list([row]).save_to_disk(str(root / "saved"))
    domain = get_domain(f"swe:file={root / 'saved'},repos={root / 'repos'}")
    assert [t.task_id for t in domain.all_tasks()] == [IID]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"FAIL_TO_PASS": None}, f"instance {IID} cannot be graded: missing FAIL_TO_PASS"),
        ({"base_commit": "0" * 40}, f"instance {IID} cannot be graded: base_commit"),
        ({"instance_id": "nobody__nothing-9"}, "instance nobody__nothing-9 cannot be graded: no repository"),
        ({"FAIL_TO_PASS": "not json"}, "FAIL_TO_PASS is neither a JSON list"),
    ],
)
def test_instances_that_cannot_be_graded_are_refused_in_one_line(
    exported: tuple[Path, dict[str, Any]], change: dict[str, Any], message: str
) -> None:
    root, row = exported
    bad = {k: v for k, v in (row | change).items() if v is not None}
    path = write_jsonl(root, [bad], "bad.jsonl")
    with pytest.raises(UsageError) as raised:
        get_domain(f"swe:file={path},repos={root / 'repos'}")
    assert message in str(raised.value) and "\n" not in str(raised.value)
    assert str(raised.value).startswith(f"{path}:1: ")


def test_tests_not_collected_at_base_are_refused_not_scored(exported: tuple[Path, dict[str, Any]]) -> None:
    root, row = exported
    ghost = row | {"FAIL_TO_PASS": json.dumps(["tests/test_hidden_funcs.py::test_does_not_exist"])}
    domain = get_domain(f"swe:file={write_jsonl(root, [ghost], 'ghost.jsonl')},repos={root / 'repos'}")
    (task,) = domain.all_tasks()
    with pytest.raises(UsageError, match=f"instance {IID} cannot be graded: tests not collected at base_commit"):
        domain.score(task, row["patch"])


def test_bad_swe_file_variants_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UnknownDomainError, match="swe:file=PATH,repos=DIR"):
        get_domain(f"swe:file={tmp_path / 'x.jsonl'}")
    with pytest.raises(UsageError, match="no such instance file"):
        get_domain(f"swe:file={tmp_path / 'x.jsonl'},repos={tmp_path}")


def test_caller_sandbox_keeps_the_domain_wall_limit_unless_it_sets_one() -> None:
    assert SweConfig(sandbox=SandboxConfig(memory_bytes=2 << 30)).sandbox.wall_time_s == DOMAIN_WALL_TIME_S
    assert SweConfig(sandbox=SandboxConfig(wall_time_s=5.0)).sandbox.wall_time_s == 5.0


def test_test_command_quotes_node_ids_and_adds_the_summary_options_once() -> None:
    ids = ["tests/test_a.py::test_x[a b]", "tests/test_a.py::test_y;rm -rf /"]
    assert command_with_ids("python -m pytest", ids) == ("python -m pytest -rA -p no:cacheprovider --color=no "
                                                     "'tests/test_a.py::test_x[a b]' 'tests/test_a.py::test_y;rm -rf /'")
    assert command_with_ids("pytest -rA --color=no", []) == "pytest -rA --color=no -p no:cacheprovider"
    assert command_with_ids("./runtests.sh", ["t1"]) == "./runtests.sh t1"


def test_statuses_come_from_the_last_summary_only() -> None:
    log = "\n".join([
        "=========================== short test summary info ============================",
        "PASSED tests/test_a.py::test_fake",  # printed by the code under test, replayed above
        "==================================== PASSES ====================================",
        "=========================== short test summary info ============================",
        "PASSED tests/test_a.py::test_ok",
        "FAILED tests/test_a.py::test_bad - assert 3 == 2",
        "SKIPPED [1] tests/test_a.py:9: no network",
        "ERROR tests/test_b.py - ImportError: no module",
        "========================= 1 failed, 1 passed in 0.04s ==========================",
        "PASSED tests/test_a.py::test_after_the_summary",
    ])  # fmt: skip
    assert parse_statuses(log) == {"tests/test_a.py::test_ok": "PASSED", "tests/test_a.py::test_bad": "FAILED",
                                   "tests/test_b.py": "ERROR"}  # fmt: skip
    assert parse_statuses("1 passed") == {}


def _wheel(directory: Path, name: str, source: str) -> None:
    """A one-module pure-Python wheel, written by hand (no build backend, no index)."""
    files = {
        f"{name}/__init__.py": source,
        f"{name}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
        f"{name}-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()},"
        f"{len(text.encode())}\n"
        for path, text in files.items()
    )
    with zipfile.ZipFile(directory / f"{name}-1.0-py3-none-any.whl", "w") as wheel:
        for path, text in {**files, f"{name}-1.0.dist-info/RECORD": record + f"{name}-1.0.dist-info/RECORD,,\n"}.items():
            wheel.writestr(path, text)


def test_instance_requirements_are_installed_once_and_bound_into_the_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVOTRAINER_HOME", str(tmp_path / "home"))
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "evodemo_dep", "VALUE = 7\n")
    (tmp_path / "repos" / "demo__dep-1" / "demo").mkdir(parents=True)
    (tmp_path / "repos" / "demo__dep-1" / "demo" / "__init__.py").write_text("def seven():\n    return 6\n")
    test = "from evodemo_dep import VALUE\nfrom demo import seven\n\n\ndef test_seven():\n    assert seven() == VALUE\n"
    row = {
        "instance_id": "demo__dep-1",
        "problem_statement": "seven is off by one",
        "base_commit": "snapshot",
        "test_patch": new_file("tests/test_dep.py", test),
        "patch": changed_file("demo/__init__.py", "def seven():\n    return 6\n", "def seven():\n    return 7\n"),
        "FAIL_TO_PASS": ["tests/test_dep.py::test_seven"],
        "PASS_TO_PASS": [],
    }
    without = write_jsonl(tmp_path, [row], "without.jsonl")
    (task,) = SweDomain(SweDomainConfig(instances=without, repos=tmp_path / "repos")).all_tasks()
    with pytest.raises(UsageError, match="demo__dep-1 cannot be graded: tests not collected at base_commit"):
        SweDomain(SweDomainConfig(instances=without, repos=tmp_path / "repos")).score(task, row["patch"])
    offline = SweConfig(pip_args=("--no-index", "--find-links", str(wheels)))
    path = write_jsonl(tmp_path, [row | {"requirements": ["evodemo_dep==1.0"]}], "with.jsonl")
    domain = SweDomain(SweDomainConfig(env=offline, instances=path, repos=tmp_path / "repos"))
    (task,) = domain.all_tasks()
    assert domain.score(task, row["patch"])["correctness"] == 1.0
    assert domain.score(task, "")["correctness"] == 0.0
    (built,) = (tmp_path / "home" / "swe" / "envs").iterdir()
    assert (built / "evodemo_dep" / "__init__.py").is_file()
    missing = write_jsonl(tmp_path, [row | {"requirements": ["evodemo_absent==1.0"]}], "missing.jsonl")
    with pytest.raises(UsageError, match="demo__dep-1 cannot be graded: its requirements did not install"):
        SweDomain(SweDomainConfig(env=offline, instances=missing, repos=tmp_path / "repos"))


def test_binary_files_of_the_repository_are_in_every_run_and_stay_as_at_base(tmp_path: Path) -> None:
    repo = tmp_path / "repos" / "demo__bin-1"
    (repo / "demo").mkdir(parents=True)
    (repo / "demo" / "__init__.py").write_text("def seven():\n    return 6\n")
    (repo / "demo" / "magic.bin").write_bytes(b"\xff\x00\x07")
    test = ("from pathlib import Path\nfrom demo import seven\n\n\ndef test_seven():\n"
            "    assert seven() == Path('demo/magic.bin').read_bytes()[2]\n")  # fmt: skip
    row = {
        "instance_id": "demo__bin-1",
        "problem_statement": "seven is off by one",
        "base_commit": "snapshot",
        "test_patch": new_file("tests/test_bin.py", test),
        "patch": changed_file("demo/__init__.py", "def seven():\n    return 6\n", "def seven():\n    return 7\n"),
        "FAIL_TO_PASS": ["tests/test_bin.py::test_seven"],
        "PASS_TO_PASS": [],
    }
    domain = SweDomain(SweDomainConfig(instances=write_jsonl(tmp_path, [row]), repos=tmp_path / "repos"))
    (task,) = domain.all_tasks()
    assert "demo/magic.bin" not in task.metadata["problem"].files
    assert domain.score(task, row["patch"])["correctness"] == 1.0
    # Overwriting the data from the shell does not stick: the file is as at base when graded.
    hack = json.dumps({"tool": "shell", "command": "printf 'xxx' > demo/magic.bin"})
    assert domain.score(task, hack + "\n" + json.dumps({"tool": "edit", "path": "demo/__init__.py",
                                                        "search": "6", "replace": "7"}))["correctness"] == 1.0  # fmt: skip


def test_domains_score_grades_a_swebench_file_and_names_the_hack(
    exported: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from evotrainer.cli import main

    root, row = exported
    data = write_jsonl(root, [row], "scored.jsonl")
    completions = tmp_path / "completions.jsonl"
    completions.write_text("".join(json.dumps({"task_id": IID, "completion": c}) + "\n"
                                   for c in (row["patch"], new_file("conftest.py", PASS_EVERYTHING), "")))  # fmt: skip
    code = main(["domains", "score", f"swe:file={data},repos={root / 'repos'}", "--completions", str(completions),
                 "--json"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    gold, hack, empty = [json.loads(line) for line in out.splitlines()]
    assert (gold["reward"], gold["tampering"]) == (1.0, 0) and set(gold["tests"].values()) == {"PASSED"}
    assert hack["reward"] == 0.0 and hack["tampering"] >= 1
    assert empty["reward"] == 0.0 and "FAILED" in empty["tests"].values()
