"""Running a repository's pytest tests in the sandbox and reading each test's status.

Grading reads statuses from the log, as SWE-bench does (its `parse_log_pytest`: the
`-rA` short summary, one `STATUS node_id` line per test), never the exit code: an exit
code says nothing about which tests ran. SWE-bench's parser cannot be imported without
its whole harness (`swebench.harness` imports docker, modal and datasets at package
import), so the few lines below do the same on the same format.

The log is cut at a token the shell prints after the test command exits; the token
reaches the shell on stdin, which it reads before starting the tests, so the code under
test cannot print it. Only the last `short test summary info` section before the token
counts, which leaves out anything the code under test printed before pytest's own
summary (captured output is replayed above it). Code under test runs inside pytest's
process and could still patch pytest itself; as in SWE-bench, nothing here stops that.

Python inside the sandbox is the project's own interpreter and environment (which has
pytest), bound read-only at /opt/evotrainer-python, with plugin autoloading, user site
and PYTHONPATH off, so only the repository's own (restored) conftest files load.
"""

from __future__ import annotations

import functools
import re
import secrets
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from evotrainer.sandbox import SandboxConfig, Status, run

PYTHON_INSIDE = "/opt/evotrainer-python"
PACKAGES_INSIDE = "/opt/evotrainer-instance"
"""Where an instance's own packages (pyenv.py) are bound, first on PYTHONPATH."""
DEFAULT_TEST_CMD = "python -m pytest"
# Options grading adds to a pytest command: the per-test summary the parser reads, no
# cache directory written into the tree, no colour codes in the log.
_PYTEST_OPTIONS = ("-rA", "-p no:cacheprovider", "--color=no")
# What SWE-bench's TestStatus names; PASSED and XFAIL count as passing.
_STATUSES = ("PASSED", "FAILED", "SKIPPED", "ERROR", "XFAIL", "XPASS")
PASSING = frozenset({"PASSED", "XFAIL"})
_SUMMARY_HEADER = re.compile(r"^=+ short test summary info =+$")


@functools.cache
def project_python() -> tuple[tuple[tuple[str, str], ...], str]:
    """(read-only mounts, PATH entry) that put this process's interpreter in the sandbox.

    A virtual environment is bound at PYTHON_INSIDE (its pyvenv.cfg points the
    interpreter back at the base installation, which is bound at its own path).
    """
    prefix, base = Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()
    if prefix == base:
        return ((str(base), str(base)),), f"{base}/bin"
    return ((str(prefix), PYTHON_INSIDE), (str(base), str(base))), f"{PYTHON_INSIDE}/bin"


def sandbox_for_tests(config: SandboxConfig) -> SandboxConfig:
    mounts, _ = project_python()
    return replace(config, ro_mounts=tuple(dict.fromkeys((*config.ro_mounts, *mounts))))


def sandbox_env() -> dict[str, str]:
    _, bin_dir = project_python()
    return {
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONPATH": "",
        "PYTEST_ADDOPTS": "",
    }


def command_with_ids(base: str, node_ids: Sequence[str]) -> str:
    """`base` with the summary options (for pytest) and the node ids, each shell-quoted."""
    options = [o for o in _PYTEST_OPTIONS if "pytest" in base and o not in base]
    return " ".join([base, *options, *(shlex.quote(i) for i in node_ids)])


def parse_statuses(log: str) -> dict[str, str]:
    """node id -> status from the last `-rA` short summary section of a pytest log."""
    lines = log.splitlines()
    starts = [i for i, line in enumerate(lines) if _SUMMARY_HEADER.match(line.strip())]
    if not starts:
        return {}
    statuses: dict[str, str] = {}
    for line in lines[starts[-1] + 1 :]:
        if line.startswith("="):
            break
        words = line.replace(" - ", " ").split()
        # "SKIPPED [2] path:line: reason" counts skips, it names no test.
        if len(words) >= 2 and words[0] in _STATUSES and not re.fullmatch(r"\[\d+\]", words[1]):
            statuses[words[1]] = words[0]
    return statuses


@dataclass(frozen=True)
class TestRun:
    """What one sandboxed test command produced."""

    __test__ = False  # not a pytest class, whatever its name says
    statuses: Mapping[str, str]
    log: str
    sandbox_status: Status
    wall_time_s: float

    def passed(self, node_id: str) -> bool:
        return self.statuses.get(node_id) in PASSING


@dataclass(frozen=True)
class RunSetup:
    """What every test run of one instance shares besides the working tree."""

    sandbox: SandboxConfig
    packages: Path | None = None
    """The instance's own packages (pyenv.py), bound and put on PYTHONPATH."""
    assets: Mapping[str, bytes] = field(default_factory=dict)
    """Binary files of the repository at base (test data): present in every run, never
    part of the editable text tree, so always as they were at base."""


def with_packages(config: SandboxConfig, env: dict[str, str], packages: Path | None) -> SandboxConfig:
    """`config` with an instance's package directory bound and put on `env`'s PYTHONPATH."""
    if packages is None:
        return config
    env["PYTHONPATH"] = PACKAGES_INSIDE
    return replace(config, ro_mounts=(*config.ro_mounts, (str(packages), PACKAGES_INSIDE)))


def run_tests(files: Mapping[str, str], command: str, setup: RunSetup) -> TestRun:
    """Run `command` (a shell command line) over `files` in /work and parse its log."""
    token = secrets.token_hex(16)
    script = f"read -r token; ({command}) </dev/null 2>&1; echo; echo \"$token\""
    env = sandbox_env()
    config = with_packages(sandbox_for_tests(setup.sandbox), env, setup.packages)
    tree: dict[str, str | bytes] = {**files, **setup.assets}
    result = run(["/bin/sh", "-c", script], files=tree, stdin=token + "\n", config=config, env=env)
    log = result.stdout
    cut = log.rfind(token)
    if cut < 0:
        # The shell never got to the token: the run was killed (time, output) first.
        return TestRun({}, log + result.stderr + f"\n[test run ended: {result.status.value}]", result.status,
                       result.wall_time_s)  # fmt: skip
    log = log[:cut]
    return TestRun(parse_statuses(log), log, result.status, result.wall_time_s)
