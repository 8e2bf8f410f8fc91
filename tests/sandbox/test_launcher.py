"""The launcher that starts sandboxed runs (evotrainer/sandbox/launcher.py, launch.py).

Runs go through it, no two runs ever share a namespace or reach each other, and losing it
costs nothing but the runs it had in hand. The hostile-code tests in test_sandbox.py run
through it too (and through the direct path). Only processes the tests started are killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from evotrainer.sandbox import SandboxConfig, SandboxUnavailableError, Status, launch, run_python
from evotrainer.sandbox.namespaces import available
from evotrainer.sandbox.runner import LAUNCHER_SWITCH
from tests.conftest import IN_CI

pytestmark = pytest.mark.skipif(bool(available()) and not IN_CI, reason=available() or "sandbox available")

FAST = SandboxConfig(wall_time_s=10.0, cpu_time_s=5)
PROJECT = Path(__file__).resolve().parents[2]
NAMESPACES = ("net", "pid", "mnt", "ipc", "uts")
SAY_NAMESPACES = (
    f"import os, sys, time\nprint(*[os.readlink('/proc/self/ns/' + n) for n in {NAMESPACES!r}], flush=True)\n"
)


@pytest.fixture(autouse=True)
def through_the_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LAUNCHER_SWITCH, raising=False)


def _in_threads(programs: list[str], delays: list[float] | None = None) -> list:
    results: list = [None] * len(programs)

    def one(i: int) -> None:
        time.sleep((delays or [0.0] * len(programs))[i])
        results[i] = run_python(programs[i], config=FAST)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(programs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def _uid_of(pid: int) -> int:
    try:
        return Path(f"/proc/{pid}").stat().st_uid
    except FileNotFoundError:
        return -1


def _programs_of(launcher_pid: int) -> list[int]:
    """Host pids of programs started by one launcher: processes under a private uid
    (runner._UID_BASE and up) whose parent's parent, PID 1's parent, is that launcher.
    Other sandboxes on this machine (other test runs, a training run) are not counted."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _uid_of(int(entry.name)) >= 3_000_000:
            if _parent_of(_parent_of(int(entry.name))) == launcher_pid:
                found.append(int(entry.name))
    return found


def _processes_of(uid: int) -> list[int]:
    return [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit() and _uid_of(int(e.name)) == uid]


def _parent_of(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return 0


def _gone(pid: int, within: float = 5.0) -> bool:
    """The process exited (a zombie nobody reaped yet counts as gone)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def _wait_for_program(launcher_pid: int, within: float = 5.0) -> int:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        programs = _programs_of(launcher_pid)
        if programs:
            return programs[0]
        time.sleep(0.02)
    raise AssertionError(f"no program of launcher {launcher_pid} showed up")


def test_runs_start_in_the_launcher_not_in_the_caller() -> None:
    assert run_python("pass", config=FAST).passed
    launcher_pid = launch.current().process.pid
    results: list = []
    thread = threading.Thread(target=lambda: results.append(run_python("import time; time.sleep(1.5)", config=FAST)))
    thread.start()
    try:
        # The program's parent is PID 1 of its namespace, whose parent is the launcher
        # (on the direct path it would be a process forked from this one).
        _wait_for_program(launcher_pid)
    finally:
        thread.join()
    assert results[0].status is Status.PASSED


def test_concurrent_runs_have_namespaces_of_their_own() -> None:
    results = _in_threads([SAY_NAMESPACES + "time.sleep(1.0)"] * 6)
    assert all(r.status is Status.PASSED for r in results), results
    host = [os.readlink(f"/proc/self/ns/{n}") for n in NAMESPACES]
    seen = [r.stdout.split() for r in results]
    for kind in range(len(NAMESPACES)):
        ids = [ns[kind] for ns in seen]
        assert len(set(ids)) == len(ids), ids  # alive at once, so no id can have been recycled
        assert host[kind] not in ids


def test_a_run_never_finds_what_an_earlier_run_left_in_its_namespaces() -> None:
    # A System V shared memory segment outlives its creator until its IPC namespace dies,
    # and a file in /tmp until its tmpfs is unmounted: a reused namespace or root would
    # make the exclusive creation fail in a later run.
    code = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "IPC_CREAT, IPC_EXCL = 0o1000, 0o2000\n"
        "segment = libc.shmget(0x5EED, 4096, IPC_CREAT | IPC_EXCL | 0o600)\n"
        "os.close(os.open('/tmp/left-behind', os.O_CREAT | os.O_EXCL | os.O_WRONLY))\n"
        "print('created' if segment >= 0 else f'exists {ctypes.get_errno()}')\n"
    )
    for _ in range(6):
        r = run_python(code, config=FAST)
        assert r.status is Status.PASSED and r.stdout == "created\n", r


def test_concurrent_runs_cannot_reach_each_other() -> None:
    listener = (
        "import socket, time\n"
        "unix = socket.socket(socket.AF_UNIX); unix.bind(b'\\0evotrainer-launcher-test'); unix.listen(4)\n"
        "tcp = socket.socket(); tcp.bind(('127.0.0.1', 47011)); tcp.listen(4)\n"
        # The listener is reachable from its own run: the test can see a connection happen.
        "socket.socket(socket.AF_UNIX).connect(b'\\0evotrainer-launcher-test'); unix.accept()\n"
        "print('own connection accepted', flush=True)\n"
        "unix.settimeout(3.0)\n"
        "try:\n    unix.accept(); print('accepted a stranger')\nexcept TimeoutError:\n    print('nobody came')\n"
    )
    caller = (
        "import socket\n"
        "for family, address in ((socket.AF_UNIX, b'\\0evotrainer-launcher-test'), (socket.AF_INET, ('127.0.0.1', 47011))):\n"
        "    try:\n"
        "        socket.socket(family).connect(address); print('connected')\n"
        "    except OSError as exc:\n"
        "        print('refused', exc.errno)\n"
    )
    first, second = _in_threads([listener, caller], delays=[0.0, 1.0])
    assert first.status is Status.PASSED and second.status is Status.PASSED, (first, second)
    assert first.stdout.splitlines() == ["own connection accepted", "nobody came"]
    assert second.stdout.count("refused") == 2 and "connected" not in second.stdout


def test_many_threads_share_one_launcher() -> None:
    run_python("pass", config=FAST)
    before = launch.current()
    programs = [f"print({i} * 7)" for i in range(24)]
    results = _in_threads(programs)
    assert [r.stdout for r in results] == [f"{i * 7}\n" for i in range(24)]
    assert launch.current() is before and before.process.poll() is None


def test_a_killed_launcher_is_replaced_and_its_spare_dies_with_it() -> None:
    assert run_python("print(1)", config=FAST).passed
    old = launch.current()
    spares = [int(p) for p in Path(f"/proc/{old.process.pid}/task/{old.process.pid}/children").read_text().split()]
    assert spares  # the next run's spare, forked ahead
    os.kill(old.process.pid, signal.SIGKILL)
    old.process.wait()
    assert all(_gone(pid) for pid in spares)
    r = run_python("print(2)", config=FAST)
    assert r.status is Status.PASSED and r.stdout == "2\n"
    assert launch.current() is not old and launch.current().process.poll() is None


def test_a_launcher_killed_during_a_run_ends_it_and_leaves_nothing() -> None:
    assert run_python("pass", config=FAST).passed
    old = launch.current()
    outcome: list = []

    def long_run() -> None:
        try:
            outcome.append(run_python("import os, time\nos.fork()\ntime.sleep(30)", config=FAST))
        except SandboxUnavailableError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=long_run)
    thread.start()
    program = _wait_for_program(old.process.pid)
    uid = _uid_of(program)
    time.sleep(0.3)  # its fork too
    os.kill(old.process.pid, signal.SIGKILL)
    thread.join(timeout=8)
    assert not thread.is_alive()
    assert isinstance(outcome[0], SandboxUnavailableError), outcome
    assert _processes_of(uid) == []
    old.process.wait()
    assert run_python("print(3)", config=FAST).stdout == "3\n"


def test_a_run_that_ends_before_the_launcher_answers_runs_once() -> None:
    # The spare takes the run and the program ends while the launcher is held up: its
    # end is reported before the launcher's `P`, and the run is not started again.
    assert run_python("pass", config=FAST).passed
    old = launch.current()
    os.kill(old.process.pid, signal.SIGSTOP)
    try:
        threading.Timer(1.0, os.kill, (old.process.pid, signal.SIGCONT)).start()
        r = run_python("print('once')", config=FAST)
    finally:
        os.kill(old.process.pid, signal.SIGCONT)
    assert r.status is Status.PASSED and r.stdout == "once\n", r
    assert launch.current() is old


def test_a_stuck_launcher_is_killed_and_its_runs_go_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch, "START_TIMEOUT_S", 2.0)
    assert run_python("pass", config=FAST).passed
    old = launch.current()
    os.kill(old.process.pid, signal.SIGSTOP)  # alive but silent: a caller must not hang on it
    try:
        began = time.monotonic()
        # Its spare may have started the run before the launcher could say so: the run is
        # lost (an infrastructure fault, not a verdict), never started a second time.
        with pytest.raises(SandboxUnavailableError, match="did not answer in 2 s"):
            run_python("print(0)", config=FAST)
        assert time.monotonic() - began < 10
        assert old.process.poll() == -signal.SIGKILL
        assert run_python("print(1)", config=FAST).stdout == "1\n"
        assert launch.current() is not old
    finally:
        if old.process.poll() is None:
            os.kill(old.process.pid, signal.SIGCONT)


def test_a_forked_child_starts_a_launcher_of_its_own() -> None:
    assert run_python("pass", config=FAST).passed
    parent_launcher = launch.current().process.pid
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            r = run_python("print(5)", config=FAST)
            os.write(write_end, f"{r.stdout.strip()} {launch.current().process.pid}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as f:
        answer = f.read().split()
    os.waitpid(pid, 0)
    assert answer[0] == "5" and int(answer[1]) != parent_launcher
    assert launch.current().process.pid == parent_launcher
    assert run_python("print(6)", config=FAST).stdout == "6\n"


def test_the_launcher_exits_with_its_caller() -> None:
    caller = subprocess.Popen(
        [sys.executable, "-c",
         "from evotrainer.sandbox import launch, run_python\n"
         "assert run_python('pass').passed\n"
         "print(launch.current().process.pid, flush=True)\n"
         "import time; time.sleep(60)\n"],
        stdout=subprocess.PIPE, text=True, cwd=PROJECT, env={**os.environ, "PYTHONPATH": str(PROJECT)},
    )  # fmt: skip
    try:
        assert caller.stdout is not None
        launcher_pid = int(caller.stdout.readline())
        caller.kill()
        caller.wait()
        assert _gone(launcher_pid)
    finally:
        caller.kill()
        caller.wait()
