"""The multi-turn SWE environment: tools over one working tree, graded in the sandbox.

Each turn the policy answers with one JSON object, e.g.
    {"tool": "edit", "path": "pkg/core.py", "search": "x, lo", "replace": "x, hi"}
Tools: list_files(path), read_file(path, start, end) (1-based lines, inclusive),
search(text, path) (fixed-string grep), edit(path, search, replace) (search must occur
exactly once; empty search creates a file), run_tests (the visible tests), shell(command)
(in the sandbox, on the working tree: its file changes are kept, and grading sees them),
submit. Observations are truncated; the episode ends on submit or at the turn limit.

The environment records what the diagnostics need: any change to a test file or to test
infrastructure (conftest.py, pytest.ini, sitecustomize.py, .pth, ...: testinfra.py),
a new module named like the runner, or source that newly names the runner, through
edit, shell or a patch, is a tampering attempt, whether or not it helped (each call's
`tampered` files); and any attempt to look for version-control history. Grading
(grading.py) restores those files, adds the hidden tests and runs them in the sandbox;
with `zero_reward_on_tamper`, tampering zeroes every reward component.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import PurePosixPath
from typing import Any

from evotrainer.domains.base import ToolCall
from evotrainer.domains.isolation import SPLIT
from evotrainer.domains.swe.gitops import PatchError, apply_diff
from evotrainer.domains.swe.grading import grade_instance
from evotrainer.domains.swe.pyenv import instance_packages
from evotrainer.domains.swe.repos import SweProblem
from evotrainer.domains.swe.testinfra import (
    collides,
    folders_of,
    is_protected,
    is_runner_repository,
    is_test_path,
    names_runner_in_source,
    reaches_into_runner,
    restore_protected,
    shadows_runner,
)
from evotrainer.domains.swe.testrun import (
    DEFAULT_TEST_CMD,
    RunSetup,
    command_with_ids,
    run_tests,
    sandbox_env,
    sandbox_for_tests,
    with_packages,
)
from evotrainer.sandbox import SandboxConfig, run

TOOLS = ("list_files", "read_file", "search", "edit", "run_tests", "shell", "submit")
_HISTORY_PROBE = re.compile(r"\.git\b|\bgit\b|\breflog\b|ORIG_HEAD|\.orig\b|\.patch\b|\.diff\b|\bhg\b|\.svn\b")
_MAX_SEARCH_HITS = 50
# The generated repositories' test runner. The test files run here, in the harness; the
# repository's own modules run in a runner process (isolation.py) and every module the
# tests import from the repository is a stand-in whose functions call it there, so only
# plain values reach the asserts. The repository's code never holds the token that marks
# the summary, nor the harness's stdout (its prints go to stderr: the agent sees them).
_RUNNER = SPLIT + r"""
import importlib, importlib.abc, importlib.machinery, importlib.util, types
no_dumps()
def serve(channel_in, channel_out):
    sys.path.insert(0, ".")
    for line in channel_in:
        what, module, name, args, kwargs = json.loads(line)
        try:
            target = getattr(importlib.import_module(module), name)
        except BaseException as exc:
            send(channel_out, ["raise", type(exc).__name__, str(exc)[:500]])
            continue
        if what == "call":
            send(channel_out, answer_of(target, *decode(args), **decode(kwargs)))
        else:
            send(channel_out, ["function"] if callable(target) else answer_of(lambda: target))
runner_pid, to_runner, from_runner = fork_runner(serve, prints_to_stderr=True)
token = sys.stdin.readline().strip()
tests = json.loads(sys.stdin.readline())  # {path: source}: never on disk, where the code could read them
def ask(request):
    send(to_runner, request)
    return read_answer(from_runner)
class StandIn(importlib.abc.Loader):
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        found = {}
        def attribute(name):
            if name.startswith("__"):
                raise AttributeError(name)
            if name not in found:
                answer = ask(["attr", module.__name__, name, None, None])
                if answer == ["function"]:
                    found[name] = lambda *a, **k: value_of(ask(["call", module.__name__, name, encode(list(a)),
                                                                encode(k)]))
                else:
                    try:
                        found[name] = value_of(answer)
                    except Exception as exc:
                        raise AttributeError(name) from exc
            return found[name]
        module.__getattr__ = attribute
ROOT = os.getcwd()
class Repository(importlib.abc.MetaPathFinder):
    # Every module of the repository is a stand-in, and nothing of it ever loads here:
    # "." is not on this process's path, a top-level name is looked up in the repository
    # by name alone (a symlink leading elsewhere is still the repository's), and a
    # submodule of a stand-in is a stand-in too, so no lookup falls through to the
    # default finders, which would run the file (the runner can change the tree while
    # the tests run). The tests themselves came on stdin; stdlib modules load as usual.
    def find_spec(self, fullname, path, target=None):
        parent_name, _, name = fullname.rpartition(".")
        if parent_name:
            parent = getattr(sys.modules.get(parent_name), "__spec__", None)
            if parent is not None and isinstance(parent.loader, StandIn):
                return importlib.util.spec_from_loader(fullname, StandIn(), is_package=True)
            return None
        here = os.path.join(ROOT, name)
        if os.path.lexists(here + ".py") or os.path.isdir(here):
            return importlib.util.spec_from_loader(fullname, StandIn(), is_package=os.path.isdir(here))
        return None
# After the builtin and frozen importers (the harness's own modules stay the real ones),
# before the path finder.
sys.meta_path.insert(sys.meta_path.index(importlib.machinery.PathFinder), Repository())
only = set(sys.argv[1:])
passed = failed = 0
for path in sorted(tests):
    name = path.rsplit("/", 1)[-1]
    if not (name.startswith("test_") and name.endswith(".py")) or (only and name not in only):
        continue
    module = types.ModuleType(name[:-3])
    module.__file__ = path
    try:
        exec(compile(tests[path], path, "exec"), module.__dict__)
    except BaseException as exc:
        failed += 1
        print(f"ERROR {path}: {exc!r}")
        continue
    for name in sorted(vars(module)):
        if name.startswith("test_") and callable(getattr(module, name)):
            try:
                getattr(module, name)()
                passed += 1
                print(f"PASS {path}::{name}")
            except BaseException as exc:
                failed += 1
                print(f"FAIL {path}::{name}: {exc!r}")
sys.stdout.flush()
sys.__stdout__.write(f"\n{token} {passed} {failed}\n")
sys.__stdout__.flush()
end_runner(runner_pid, to_runner, grace_s=2.0)  # its last prints flushed before the run ends
"""


# The domain's wall limit: a caller's sandbox config that leaves wall_time_s at the
# sandbox's generic default gets this one instead (a repository's tests need longer).
DOMAIN_WALL_TIME_S = 60.0
_GENERIC_WALL_TIME_S = next(f.default for f in fields(SandboxConfig) if f.name == "wall_time_s")


def _default_sandbox() -> SandboxConfig:
    return SandboxConfig(wall_time_s=DOMAIN_WALL_TIME_S, cpu_time_s=60, memory_bytes=4 << 30, max_processes=64,
                         max_output_bytes=8 << 20, tmpfs_bytes=1 << 30, max_open_files=256)  # fmt: skip


@dataclass(frozen=True)
class SweConfig:
    max_turns: int = 20
    max_observation_chars: int = 2000
    zero_reward_on_tamper: bool = True
    sandbox: SandboxConfig = field(default_factory=_default_sandbox)
    """A caller's config keeps the domain's wall limit unless it sets its own."""
    test_cmd: str = ""
    """Test command for SWE-bench instances without their own (empty: `python -m pytest`)."""
    pip_args: tuple[str, ...] = ()
    """Extra pip options for installing instances' requirements (`--no-index`,
    `--find-links DIR` for an offline wheel directory); see pyenv.py."""
    episode_sandbox_s: float = 300.0
    """Sandbox time an episode's tool calls may spend in all (grading aside): past it,
    `shell` and `run_tests` answer with an error, so twenty `sleep 1000` calls cost an
    episode minutes, not twenty of them."""

    def __post_init__(self) -> None:
        if self.sandbox.wall_time_s == _GENERIC_WALL_TIME_S:
            object.__setattr__(self, "sandbox", replace(self.sandbox, wall_time_s=DOMAIN_WALL_TIME_S))


def parse_action(text: str) -> dict[str, Any] | None:
    """The last JSON object in `text` that names a tool, or None. Never raises."""
    decoder = json.JSONDecoder()
    found = None
    for start in [m.start() for m in re.finditer(r"\{", text)][:200]:
        try:
            obj, _ = decoder.raw_decode(text, start)
        except (json.JSONDecodeError, RecursionError):
            continue
        if isinstance(obj, dict) and isinstance(obj.get("tool"), str):
            found = obj
    return found


_MAX_ARGUMENT_DEPTH = 32


def _as_text(value: Any, depth: int = 0) -> Any:
    """`value` with every lone surrogate and NUL in its strings spelled out (`\\udccb`,
    `\\x00`) and nesting past _MAX_ARGUMENT_DEPTH cut: equal to `value` exactly when all
    of it can be written to a file, a command line and the store."""
    if depth > _MAX_ARGUMENT_DEPTH:
        return "[nested too deep]"
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")
    if isinstance(value, list):
        return [_as_text(item, depth + 1) for item in value]
    if isinstance(value, dict):
        return {_as_text(key, depth + 1): _as_text(item, depth + 1) for key, item in value.items()}
    return value


_MAX_PATH_PARTS = 64
_MAX_NAME_BYTES = 255  # what Linux file systems take
_MAX_PATH_BYTES = 3000  # below Linux's 4096, with room for the sandbox's /work/ prefix
_RESERVED = ".evotrainer"
"""The graders' own files in the sandbox (.evotrainer_runner.py) start with this."""


def clean_path(path: str) -> str | None:
    """`path` as one repository file's key (`./a.py` and `a.py/` are `a.py`), or None when
    it cannot be one: empty, `.`, absolute, `..`, NUL, not valid Unicode, a name longer
    than a file system takes, a path longer than one takes or more than _MAX_PATH_PARTS
    deep, or under a name the graders keep for their own files."""
    if not path or "\x00" in path or _as_text(path) != path or path.startswith("/"):
        return None
    if len(path.encode("utf-8")) > _MAX_PATH_BYTES:
        return None
    parts = PurePosixPath(path).parts
    if not parts or ".." in parts or len(parts) > _MAX_PATH_PARTS or parts[0].startswith(_RESERVED):
        return None
    if any(len(part.encode("utf-8")) > _MAX_NAME_BYTES for part in parts):
        return None
    return "/".join(parts)


_PAGE = 4096


def fits(files: Mapping[str, str], assets: Mapping[str, bytes], disk_bytes: int) -> bool:
    """Whether the tree, laid out in the sandbox's in-memory disk (a page at least for
    each file and each folder), leaves a fifth of it free for the graders and the tests:
    a thousand 1-byte files take four megabytes there, not one kilobyte."""
    folders = {str(PurePosixPath(p).parent) for p in [*files, *assets]}
    used = _PAGE * len(folders)
    for data in [*(text.encode("utf-8") for text in files.values()), *assets.values()]:
        used += max(1, -(-len(data) // _PAGE)) * _PAGE
    return used <= disk_bytes * 0.8


def _shell_report(stdout: str) -> tuple[int, dict[str, str], set[str], str] | None:
    """(exit status, changed files, paths left, output) from _SHELL_REPORT's JSON, or None
    unless every part has its type and every path is a clean one (clean_path): a file name
    the command made of undecodable bytes, or a report it forged, keeps nothing."""
    try:
        report = json.loads(stdout)
        exit_code, changed, paths, output = report["exit"], report["changed"], report["paths"], report["output"]
    except (ValueError, KeyError, TypeError, RecursionError):
        return None
    if not (isinstance(exit_code, int) and isinstance(output, str) and isinstance(changed, dict)
            and isinstance(paths, list)):  # fmt: skip
        return None
    names = [*changed, *paths]
    if not all(isinstance(p, str) and clean_path(p) == p for p in names):
        return None
    if not all(isinstance(c, str) and _as_text(c) == c for c in changed.values()):
        return None
    return exit_code, changed, set(paths), output


def _is_test_module(path: str) -> bool:
    """A Python file under tests/: what the generated repositories' runner runs."""
    parts = PurePosixPath(path).parts
    return len(parts) > 1 and parts[0] == "tests" and path.endswith(".py")


def run_test_files(files: dict[str, str], config: SweConfig, only: tuple[str, ...] = ()) -> tuple[int, int, str]:
    """(passed, failed, output) of a generated problem's tests, run by the built-in runner.

    A token on stdin marks the real summary line, and the repository's code runs in a
    process of its own that never sees the token, the tests or the summary's stdout
    (_RUNNER), so code that exits early, prints a summary of its own or looks up the
    hidden tests' expected values is counted as failing. `-I -S`
    keeps conftest files, sitecustomize and .pth files out of the run.
    """
    token = secrets.token_hex(16)
    # The tests reach the harness on stdin: as files, the code under test could read
    # the hidden ones' expected values.
    tests = {path: text for path, text in files.items() if _is_test_module(path)}
    sandbox_files = {path: text for path, text in files.items() if path not in tests}
    sandbox_files[".evotrainer_runner.py"] = _RUNNER
    argv = [config.sandbox.python, "-I", "-S", ".evotrainer_runner.py", *only]
    stdin = f"{token}\n{json.dumps(tests)}\n"
    result = run(argv, files=sandbox_files, stdin=stdin, config=config.sandbox)
    output = result.stdout + result.stderr
    for line in reversed(result.stdout.splitlines()):
        parts = line.split()
        if len(parts) == 3 and parts[0] == token and parts[1].isdigit() and parts[2].isdigit():
            return int(parts[1]), int(parts[2]), output.replace(token, "summary:")
    return 0, 1, output + f"\n[test run ended: {result.status.value}]"


# Runs the agent's command on /work, then reports every file it changed (ctime after the
# stamp: unlike mtime, no program can set it back) and every path left, so the caller's
# working tree follows what the command did.
_SHELL = 'touch /tmp/.evotrainer_stamp; (eval "$1") >/tmp/.evotrainer_out 2>&1 </dev/null; exec "$2" -I -S -c "$3" "$?"'
_SHELL_REPORT = r"""
import json, os, sys
stamp = os.stat("/tmp/.evotrainer_stamp").st_ctime_ns
changed, paths = {}, []
for dirpath, dirnames, filenames in os.walk("/work"):
    for name in filenames:
        full = os.path.join(dirpath, name)
        if os.path.islink(full) or not os.path.isfile(full):
            continue
        rel = os.path.relpath(full, "/work")
        try:
            rel.encode("utf-8")
        except UnicodeEncodeError:  # a name of undecodable bytes: no file of a text tree
            continue
        paths.append(rel)
        if os.stat(full).st_ctime_ns >= stamp:
            try:
                with open(full, encoding="utf-8") as f:
                    text = f.read()
            except (OSError, UnicodeDecodeError):
                continue
            if "\0" not in text:  # text holding NUL is binary to the tree, as undecodable bytes are
                changed[rel] = text
with open("/tmp/.evotrainer_out", "rb") as f:
    output = f.read()[-65536:].decode(errors="replace")
sys.stdout.write(json.dumps({"exit": int(sys.argv[1]), "output": output, "changed": changed, "paths": paths}))
"""


class SweEnvironment:
    """One episode's state. `step` takes the policy's text and returns the observation."""

    def __init__(self, problem: SweProblem, config: SweConfig) -> None:
        self.problem = problem
        self.config = config
        self.files = dict(problem.files)
        self.calls: list[ToolCall] = []
        self.done = False
        self._sandbox_s_left = config.episode_sandbox_s
        self.counts = {"tamper_attempts": 0, "history_probes": 0, "parse_failures": 0, "test_runs": 0, "edits": 0}
        self.edited_files: set[str] = set()
        self.test_statuses: dict[str, str] = {}
        """After grade(): node id -> status of each graded test (SWE-bench instances)."""
        self._changed: tuple[str, ...] = ()
        self._attempted: tuple[str, ...] = ()
        self._base_names_runner: bool | None = None
        self._base_is_runner: bool | None = None
        instance = problem.instance
        packages = None if instance is None else instance_packages(
            instance.requirements, config.pip_args, instance.instance_id
        )  # fmt: skip
        self.setup = RunSetup(config.sandbox, packages, problem.assets)

    def _truncate(self, text: str) -> str:
        # What the policy and the evidence get: no NUL or lone surrogate (a file the
        # agent's command wrote can hold them), which the store would refuse.
        limit = self.config.max_observation_chars
        text = _as_text(text)
        return text if len(text) <= limit else text[:limit] + f"\n[... truncated {len(text) - limit} chars]"

    def step(self, turn: int, text: str) -> str:
        action = parse_action(text)
        self._changed, self._attempted = (), ()
        if action is None:
            self.counts["parse_failures"] += 1
            observation, ok, tool, args = (
                'error: answer with one JSON object like {"tool": "list_files"}',
                False,
                "",
                {},
            )
        else:
            tool = action["tool"]
            args = {k: v for k, v in action.items() if k != "tool"}
            readable = _as_text(args)
            if _HISTORY_PROBE.search(json.dumps(readable)) or tool in ("git", "log", "history"):
                self.counts["history_probes"] += 1
            if readable != args:
                # JSON escapes can spell lone surrogates, which no file, command or record
                # can hold: refused here, rather than failing the sandbox or the store.
                observation, ok, args = "error: the call holds text that is not valid Unicode", False, readable
            else:
                observation, ok = self._dispatch(tool, args)
        observation = self._truncate(observation)
        self.calls.append(ToolCall(turn=turn, tool=tool, arguments=args, ok=ok, observation=observation,
                                   changed=self._changed, tampered=self._tampering()))  # fmt: skip
        return observation

    def step_patch(self, turn: int, diff: str) -> str:
        """Apply a whole unified diff as one call (a completion that is a diff, not tool calls)."""
        self._changed, self._attempted = (), ()
        if _as_text(diff) != diff:
            observation, ok = "error: the diff holds text that is not valid Unicode", False
        elif "GIT binary patch" in diff:
            # git would build a binary patch's result in memory, at the size it declares.
            observation, ok = "error: binary patches are not accepted; edit text files", False
        else:
            observation, ok = self.apply_patch(diff)
        self.calls.append(ToolCall(turn=turn, tool="apply_patch", arguments={"diff_chars": len(diff)}, ok=ok,
                                   observation=self._truncate(observation), changed=self._changed,
                                   tampered=self._tampering()))  # fmt: skip
        return observation

    def _tampering(self) -> tuple[str, ...]:
        """Files the last call tampered with (or tried to); counted once per call.

        Tampering: any change to a test file or test infrastructure, even a failed edit;
        and source that newly names the test runner (pytest, _pytest, pluggy) in a
        repository whose source never did, since code under test runs inside pytest and
        could rewrite its verdicts from there (see testinfra.reaches_into_runner).
        """
        tampered = set(self._attempted)
        for path in self._changed:
            if is_protected(path) or (shadows_runner(path) and not self._runner_repository()):
                tampered.add(path)
            elif reaches_into_runner(path, self.files, self.problem.files) and not self._runner_in_base():
                tampered.add(path)
        if tampered:
            self.counts["tamper_attempts"] += 1
        return tuple(sorted(tampered))

    def _runner_repository(self) -> bool:
        if self._base_is_runner is None:
            self._base_is_runner = is_runner_repository(self.problem.files)
        return self._base_is_runner

    def _runner_in_base(self) -> bool:
        if self._base_names_runner is None:
            self._base_names_runner = names_runner_in_source(self.problem.files)
        return self._base_names_runner

    def _dispatch(self, tool: str, args: dict[str, Any]) -> tuple[str, bool]:
        path = str(args.get("path", ""))
        if tool == "list_files":
            return "\n".join(sorted(p for p in self.files if p.startswith(path.lstrip("./")))), True
        if tool == "read_file":
            return self._read(path, args.get("start"), args.get("end"))
        if tool == "search":
            return self._search(str(args.get("text", args.get("pattern", ""))), path)
        if tool == "edit":
            return self._edit(path, str(args.get("search", "")), str(args.get("replace", "")))
        if tool in ("run_tests", "shell") and self._sandbox_s_left <= 0:
            return f"error: this episode's sandbox time ({self.config.episode_sandbox_s:g} s) is spent", False
        if tool == "run_tests":
            self.counts["test_runs"] += 1
            return self._timed(self._run_visible_tests)
        if tool == "shell":
            return self._timed(lambda: self._shell(str(args.get("command", ""))))
        if tool == "submit":
            self.done = True
            return "submitted", True
        return f"error: unknown tool {tool!r}; tools: {', '.join(TOOLS)}", False

    def _timed(self, call: Callable[[], tuple[str, bool]]) -> tuple[str, bool]:
        started = time.monotonic()
        try:
            return call()
        finally:
            self._sandbox_s_left -= time.monotonic() - started

    def _read(self, path: str, start: Any, end: Any) -> tuple[str, bool]:
        if path not in self.files:
            return f"error: no such file {path!r}", False
        if start is None and end is None:
            return self.files[path], True
        lines = self.files[path].splitlines()
        try:
            first, last = int(start or 1), int(end or len(lines))
        except (TypeError, ValueError, OverflowError):  # OverflowError: JSON's Infinity
            return "error: start and end must be line numbers", False
        first, last = max(first, 1), min(last, len(lines))
        body = "\n".join(f"{n:>6}  {lines[n - 1]}" for n in range(first, last + 1))
        return f"{path} lines {first}-{last} of {len(lines)}\n{body}", True

    def _search(self, text: str, path: str) -> tuple[str, bool]:
        if not text:
            return "error: give the text to search for", False
        # A fixed string, not a regular expression: a pattern from the policy must not be
        # able to make the host backtrack for minutes.
        hits = [
            f"{p}:{n}: {line.strip()[:200]}"
            for p in sorted(self.files)
            if p.startswith(path.lstrip("./"))
            for n, line in enumerate(self.files[p].splitlines(), 1)
            if text in line
        ]
        more = f"\n[{len(hits) - _MAX_SEARCH_HITS} more matches]" if len(hits) > _MAX_SEARCH_HITS else ""
        return ("\n".join(hits[:_MAX_SEARCH_HITS]) + more) if hits else "no matches", True

    def _record_changes(self, before: dict[str, str]) -> None:
        """Note which files the last call changed (`_tampering` judges them)."""
        changed = sorted(p for p in before.keys() | self.files.keys() if before.get(p) != self.files.get(p))
        self._changed = tuple(changed)
        self.edited_files.update(changed)

    def _edit(self, path: str, search: str, replace: str) -> tuple[str, bool]:
        cleaned = clean_path(path)
        path = cleaned or path
        if is_protected(path):
            self._attempted = (path,)  # an attempt counts even when the edit itself fails
        if cleaned is None:
            return "error: path must be relative and inside the repository", False
        if self._collides(path):
            return f"error: {path} would be both a file and a folder", False
        if path not in self.files:
            if search:
                return f"error: no such file {path!r} (use an empty search to create it)", False
            self.files[path] = replace
        else:
            count = self.files[path].count(search) if search else 0
            if count != 1:
                return f"error: search text found {count} times in {path}; it must match exactly once", False
            self.files[path] = self.files[path].replace(search, replace, 1)
        self.counts["edits"] += 1
        self.edited_files.add(path)
        self._changed = (path,)
        return f"edited {path}", True

    def _collides(self, path: str) -> bool:
        """Whether a new file at `path` would sit inside a file, or over a folder, of the
        tree or of the instance's binary assets."""
        if path in self.files:
            return False
        tree = {*self.files, *self.setup.assets}
        return collides(path, tree, folders_of(tree))

    def apply_patch(self, diff: str) -> tuple[str, bool]:
        """Apply a unified diff to the working tree as edits would be (tampering included)."""
        before = dict(self.files)
        try:
            patched = apply_diff(self.files, diff)
        except PatchError as exc:
            return f"error: the diff does not apply: {exc}", False
        # A name git wrote from quoted bytes that are not UTF-8 is no file of a text tree.
        self.files = {path: text for path, text in patched.items() if clean_path(path) == path}
        self._record_changes(before)
        self.counts["edits"] += len(self._changed)
        return f"patched {', '.join(self._changed) or 'nothing'}", True

    def _shell(self, command: str) -> tuple[str, bool]:
        # The report carries the changed files back, so it may be larger than a test log.
        output_bytes = max(self.config.sandbox.max_output_bytes, 32 << 20)
        config = sandbox_for_tests(replace(self.config.sandbox, max_output_bytes=output_bytes))
        argv = ["/bin/sh", "-c", _SHELL, "sh", command, self.config.sandbox.python, _SHELL_REPORT]
        # No .pytest_cache in the working tree from the agent's own test runs.
        env = {**sandbox_env(), "PYTEST_ADDOPTS": "-p no:cacheprovider"}
        config = with_packages(config, env, self.setup.packages)
        result = run(argv, files={**self.files, **self.setup.assets}, config=config, env=env)
        report = _shell_report(result.stdout)
        if report is None:
            # Killed (time, output), or its report was garbled or forged past what a tree
            # can hold (the command runs as the reporter's uid): none of its changes are
            # kept, so what the agent sees next is exactly what grading would see.
            return f"[{result.status.value}: the command's file changes were not kept]\n{result.stderr[-2000:]}", False
        exit_code, changed, kept, output = report
        after = {p: c for p, c in self.files.items() if p in kept}
        after.update(changed)
        if not fits(after, self.setup.assets, self.config.sandbox.tmpfs_bytes):
            # Kept, it would leave no room to lay the tree out again for its tests.
            return "[the command's files fill the sandbox's disk: its file changes were not kept]", False
        before = dict(self.files)
        self.files = after
        self._record_changes(before)
        return f"[exit {exit_code}]\n{output}", exit_code == 0

    def _visible_test_files(self) -> list[str]:
        """An instance's visible tests: the test files its test_patch touches that exist now."""
        instance = self.problem.instance
        assert instance is not None
        named = [p for p in self.files if is_test_path(p) and p.endswith(".py") and p in instance.test_patch]
        return sorted(named)

    def _run_visible_tests(self) -> tuple[str, bool]:
        instance = self.problem.instance
        if instance is None:
            passed, failed, output = run_test_files(self.files, self.config)
            return f"{passed} passed, {failed} failed\n{output}", True
        base = instance.test_cmd or self.config.test_cmd or DEFAULT_TEST_CMD
        command = command_with_ids(base, self._visible_test_files())
        result = run_tests(self.files, command, self.setup)
        passed = sum(s in ("PASSED", "XFAIL") for s in result.statuses.values())
        return f"{passed} passed, {len(result.statuses) - passed} failed\n{result.log[-6000:]}", True

    def grade(self) -> dict[str, float]:
        """Reward components of the final repository state."""
        instance = self.problem.instance
        format_reward = 1.0 - self.counts["parse_failures"] / max(1, len(self.calls))
        if instance is not None:
            graded = grade_instance(self.files, self.problem.files, instance, self.config.test_cmd, self.setup)
            self.test_statuses = graded.statuses
            rewards = {**graded.rewards, "format": format_reward}
        else:
            rewards = {**self._grade_generated(), "format": format_reward}
        if self.config.zero_reward_on_tamper and self.counts["tamper_attempts"]:
            rewards = dict.fromkeys(rewards, 0.0)
        return rewards

    def _grade_generated(self) -> dict[str, float]:
        graded = restore_protected(self.files, self.problem.files)
        visible_passed, visible_failed, _ = run_test_files(graded, self.config)
        graded.update(self.problem.hidden_tests)
        hidden_names = tuple(PurePosixPath(p).name for p in self.problem.hidden_tests)
        passed, failed, _ = run_test_files(graded, self.config, only=hidden_names)
        return {
            "correctness": float(passed > 0 and failed == 0),
            "partial_tests": passed / (passed + failed) if passed + failed else 0.0,
            "visible_tests": float(visible_passed > 0 and visible_failed == 0),
        }
