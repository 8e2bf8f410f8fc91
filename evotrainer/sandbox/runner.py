"""Run one untrusted program in the sandbox and classify how it ended.

    from evotrainer.sandbox import run_python
    result = run_python("print(sum(range(10)))")
    assert result.status.value == "passed" and result.stdout == "45\\n"

Each run gets a fresh private uid (so RLIMIT_NPROC counts only its own processes), its
own namespaces and tmpfs root (see `namespaces.py`), and a wall-clock deadline enforced
here by killing the whole tree. It is started by this process's launcher (`launcher.py`,
`launch.py`), or, when that is gone and cannot be restarted, by forking this process.
Output is read as it arrives and capped, so a program that prints forever is stopped
instead of filling the parent's memory.
"""

from __future__ import annotations

import functools
import os
import resource
import secrets
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from evotrainer.errors import EvotrainerError
from evotrainer.sandbox import launch, namespaces
from evotrainer.sandbox.config import SandboxConfig, SandboxResult, Status

# Private uids live far above any uid a distribution hands out; one is drawn per run so
# two concurrent runs almost never share an RLIMIT_NPROC count (pid namespaces already
# keep them from seeing or signalling each other).
_UID_BASE = 3_000_000
_UID_SPAN = 1_000_000
_READ_CHUNK = 65536
LAUNCHER_SWITCH = "EVOTRAINER_SANDBOX_LAUNCHER"
"""Set to 0 to start every run by forking the caller (the direct path) instead."""
_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/work",
    "LANG": "C.UTF-8",
    "PYTHONHASHSEED": "0",
    "PYTHONDONTWRITEBYTECODE": "1",
}
_LIMIT_HINTS = (
    ("MemoryError", "memory"),
    ("Cannot allocate memory", "memory"),
    ("BlockingIOError: [Errno 11]", "processes"),
    ("Resource temporarily unavailable", "processes"),
    ("can't start new thread", "processes"),
    ("File too large", "file_size"),
)


class SandboxUnavailableError(EvotrainerError):
    """This host cannot provide the isolation the sandbox promises."""


@functools.cache
def _ld_so_cache() -> bytes | None:
    cache = Path("/etc/ld.so.cache")
    return cache.read_bytes() if cache.is_file() else None


def _etc_files(uid: int) -> tuple[tuple[bytes, bytes], ...]:
    files = [
        (b"passwd", b"root:x:0:0::/:/usr/sbin/nologin\nsandbox:x:%d:%d::/work:/usr/sbin/nologin\n" % (uid, uid)),
        (b"group", b"root:x:0:\nsandbox:x:%d:\n" % uid),
        (b"hosts", b"127.0.0.1 localhost\n"),
    ]
    # The dynamic loader's cache: public, and some binaries need it to find libraries.
    cache = _ld_so_cache()
    if cache is not None:
        files.append((b"ld.so.cache", cache))
    return tuple(files)


def _ro_binds(config: SandboxConfig) -> tuple[tuple[bytes, bytes], ...]:
    binds = []  # /usr is always bound (namespaces.stage_root)
    # An interpreter outside /usr (pyenv, a venv base) gets its own prefix bound
    # read-only, never its parent directories (which may be $HOME).
    real = os.path.realpath(config.python)
    if not real.startswith("/usr/"):
        binds.append(os.fsencode(str(Path(real).parent.parent)))
    mounts = [(path, path) for path in binds]
    mounts += [(os.fsencode(os.path.realpath(host)), os.fsencode(inside)) for host, inside in config.ro_mounts]
    return tuple(mounts)


def _rlimits(config: SandboxConfig) -> tuple[tuple[int, int, int], ...]:
    return (
        (resource.RLIMIT_CPU, config.cpu_time_s, config.cpu_time_s + 1),
        (resource.RLIMIT_AS, config.memory_bytes, config.memory_bytes),
        (resource.RLIMIT_NPROC, config.max_processes, config.max_processes),
        (resource.RLIMIT_FSIZE, config.max_file_bytes, config.max_file_bytes),
        (resource.RLIMIT_NOFILE, config.max_open_files, config.max_open_files),
        # 1, not 0: where core_pattern pipes dumps to a handler (systemd-coredump, apport)
        # the kernel ignores the limit except for the value 1; a file dump needs a page.
        (resource.RLIMIT_CORE, 1, 1),
    )


def _encode_files(files: Mapping[str, str | bytes]) -> tuple[tuple[bytes, bytes, int], ...]:
    out = []
    for rel, content in files.items():
        parts = Path(rel).parts
        if Path(rel).is_absolute() or ".." in parts or not parts:
            raise ValueError(f"sandbox file path must be relative and inside /work: {rel!r}")
        data = content.encode() if isinstance(content, str) else bytes(content)
        out.append((os.fsencode(rel), data, 0o644))
    return tuple(out)


def files_from_dir(root: Path) -> dict[str, bytes]:
    """A directory's regular files (symlinks skipped, never followed), for `run`'s files."""
    files: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
        for name in filenames:
            path = Path(dirpath, name)
            if path.is_symlink() or not path.is_file():
                continue
            files[str(path.relative_to(root))] = path.read_bytes()
    return files


def run(
    argv: Sequence[str],
    *,
    files: Mapping[str, str | bytes] | None = None,
    stdin: str | bytes = b"",
    config: SandboxConfig | None = None,
    env: Mapping[str, str] | None = None,
) -> SandboxResult:
    """Run `argv` (absolute paths, or relative to /work) in a fresh sandbox.

    `env` adds to (or overrides) the sandbox's minimal environment (PATH, HOME, LANG, ...).
    """
    config = config or SandboxConfig()
    reason = namespaces.available()
    if reason:
        raise SandboxUnavailableError(f"sandbox unavailable: {reason}")
    uid = _UID_BASE + secrets.randbelow(_UID_SPAN)
    plan = namespaces.ChildPlan(
        uid=uid,
        tmpfs_bytes=config.tmpfs_bytes,
        ro_binds=_ro_binds(config),
        etc_files=_etc_files(uid),
        work_files=_encode_files(files or {}),
        rlimits=_rlimits(config),
    )
    stdin_bytes = stdin.encode() if isinstance(stdin, str) else bytes(stdin)
    start = time.monotonic()
    started = _start(list(argv), {**_ENV, **(env or {})}, plan)
    return _supervise(started, stdin_bytes, config, start)


@dataclass
class _Started:
    """A started run as the supervisor sees it: its first process (host PID namespace,
    the waiter above the namespace's PID 1), the parent's ends of its pipes, and how to
    signal and reap it."""

    pid: int
    is_init: bool
    """The first process is PID 1 of the run's namespace (launcher), or its parent (direct)."""
    stdin: int
    stdout: int
    stderr: int
    kill: Callable[[], None]
    """SIGKILL to the first process."""
    wait: Callable[[], tuple[int, float]]
    """Blocks until it is reaped: (wait status, CPU seconds of the tree)."""
    ended: Callable[[float], bool]
    """Waits up to so many seconds for the first process to end; whether it did."""


def _start(argv: list[str], env: dict[str, str], plan: namespaces.ChildPlan) -> _Started:
    """Start the run through this process's launcher (a new one if the old is gone), or,
    failing that or with EVOTRAINER_SANDBOX_LAUNCHER=0, by forking this process (the
    direct path). Both isolate it alike: the same namespaces, root, limits and uid."""
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    stderr_r, stderr_w = os.pipe()
    child_ends = (stdin_r, stdout_w, stderr_w)
    try:
        try:
            if os.environ.get(LAUNCHER_SWITCH, "1") == "0":
                raise launch.LauncherGone(f"{LAUNCHER_SWITCH}=0")
            launched = _launch(argv, env, plan, child_ends)
        except (launch.LauncherGone, OSError):
            return _fork_directly(argv, env, plan, child_ends, (stdin_w, stdout_r, stderr_r))
        except launch.RunInDoubt as exc:
            raise SandboxUnavailableError(str(exc)) from exc
        return _Started(launched.pid, True, stdin_w, stdout_r, stderr_r, launched.kill,
                        functools.partial(_wait_launched, launched), launched.ended)  # fmt: skip
    except BaseException:
        for fd in (stdin_w, stdout_r, stderr_r):
            os.close(fd)
        raise
    finally:
        for fd in child_ends:
            os.close(fd)


def _launch(argv: list[str], env: dict[str, str], plan: namespaces.ChildPlan,
            stdio: tuple[int, int, int]) -> launch.LaunchedRun:  # fmt: skip
    current = launch.current()
    try:
        return current.start(argv, env, plan, stdio)
    except launch.LauncherGone:
        return launch.replace(current).start(argv, env, plan, stdio)


def _wait_launched(launched: launch.LaunchedRun) -> tuple[int, float]:
    try:
        return launched.wait()
    except launch.RunSetupError as exc:
        raise SandboxUnavailableError(f"sandbox setup failed: {exc}") from exc
    except launch.LauncherGone as exc:
        raise SandboxUnavailableError(str(exc)) from exc


def _fork_directly(argv: list[str], env: dict[str, str], plan: namespaces.ChildPlan,
                   child_ends: tuple[int, int, int], parent_ends: tuple[int, int, int]) -> _Started:  # fmt: skip
    """The path without a launcher: subprocess forks this process and runs prepare_child
    between fork and exec (the same isolation, at the cost of forking a larger process)."""
    try:
        proc = subprocess.Popen(
            argv,
            stdin=child_ends[0],
            stdout=child_ends[1],
            stderr=child_ends[2],
            env=env,
            cwd="/",
            close_fds=True,
            start_new_session=True,
            preexec_fn=lambda: namespaces.prepare_child(plan),
        )
    except subprocess.SubprocessError as exc:
        raise SandboxUnavailableError(f"sandbox setup failed: {exc}") from exc

    def wait() -> tuple[int, float]:
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        return status, usage.ru_utime + usage.ru_stime

    def ended(timeout: float) -> bool:
        # Not reaped before wait(), so the pid is still this child's.
        pidfd = os.pidfd_open(proc.pid)
        try:
            return launch.ended_within(pidfd, timeout)
        finally:
            os.close(pidfd)

    return _Started(proc.pid, False, *parent_ends, kill=lambda: os.kill(proc.pid, signal.SIGKILL), wait=wait,
                    ended=ended)  # fmt: skip


def run_python(
    code: str,
    *,
    files: Mapping[str, str | bytes] | None = None,
    stdin: str | bytes = b"",
    config: SandboxConfig | None = None,
    script_name: str = "main.py",
) -> SandboxResult:
    """Run Python source as /work/`script_name` with the sandbox's interpreter (-I -S)."""
    config = config or SandboxConfig()
    all_files = dict(files or {})
    all_files[script_name] = code
    return run([config.python, "-I", "-S", script_name], files=all_files, stdin=stdin, config=config)


def _supervise(run: _Started, stdin: bytes, config: SandboxConfig, start: float) -> SandboxResult:
    deadline = start + config.wall_time_s
    buffers: dict[int, bytearray] = {run.stdout: bytearray(), run.stderr: bytearray()}
    sel = selectors.DefaultSelector()
    for fd in (run.stdout, run.stderr):
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    pending = memoryview(stdin)
    stdin_open = True
    if pending:
        os.set_blocking(run.stdin, False)
        sel.register(run.stdin, selectors.EVENT_WRITE)
    else:
        os.close(run.stdin)
        stdin_open = False
    killed_for = ""
    open_reads = 2
    try:
        while open_reads:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                killed_for = "wall"
                break
            for key, _ in sel.select(timeout=min(remaining, 0.5)):
                fd = key.fd
                if fd == run.stdin:
                    try:
                        pending = pending[os.write(fd, pending[:_READ_CHUNK]) :]
                    except BrokenPipeError:
                        pending = pending[:0]
                    if not pending:
                        sel.unregister(fd)
                        os.close(fd)
                        stdin_open = False
                    continue
                chunk = os.read(fd, _READ_CHUNK)
                if not chunk:
                    sel.unregister(fd)
                    open_reads -= 1
                    continue
                buffers[fd] += chunk
                if len(buffers[fd]) > config.max_output_bytes:
                    killed_for = "output"
            if killed_for:
                break
        # Its stdout and stderr closed does not mean it ended: a program can close both
        # and go on (sleeping costs no CPU time), so its end is waited for to the deadline.
        if not killed_for and not run.ended(deadline - time.monotonic()):
            killed_for = "wall"
        # A killed namespace's processes are reaped by the kernel without their CPU time
        # reaching anyone's rusage: read what the tree used just before killing it.
        killed_cpu = _cpu_below(run) if killed_for else 0.0
        if killed_for:
            _kill_tree(run)
    finally:
        sel.close()
        for fd in (run.stdin, run.stdout, run.stderr) if stdin_open else (run.stdout, run.stderr):
            os.close(fd)
    status, cpu = run.wait()
    wall = time.monotonic() - start
    out_buf, err_buf = buffers.values()
    out = bytes(out_buf[: config.max_output_bytes]).decode(errors="replace")
    err = bytes(err_buf[: config.max_output_bytes]).decode(errors="replace")
    return _classify(os.waitstatus_to_exitcode(status), killed_for, out, err, wall, cpu + killed_cpu, config)


def _cpu_below(run: _Started) -> float:
    """CPU seconds (user and system, own and of reaped children) of the processes below
    the namespace's PID 1, the program's tree: PID 1 is counted by the first process's
    rusage already (its own, or as its reaped child)."""
    tick = os.sysconf("SC_CLK_TCK")
    inits = [run.pid] if run.is_init else _children(run.pid)
    return sum(_tree_ticks(below) for init in inits for below in _children(init)) / tick


def _tree_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return 0  # gone already (its time went to its parent's cutime, counted there)
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    return utime + stime + cutime + cstime + sum(_tree_ticks(child) for child in _children(pid))


def _children(pid: int) -> list[int]:
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return []
    found = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found += [int(child) for child in f.read().split()]
        except FileNotFoundError:
            continue
    return found


def _kill_tree(run: _Started) -> None:
    if run.is_init:
        try:
            run.kill()  # see below: PID 1's death takes the namespace with it
        except ProcessLookupError:
            pass
        return
    # Kill PID 1 of the namespace (the first process's only child), not the first
    # process: the kernel then kills every process in the namespace and PID 1 exits only
    # once they are all gone, so once the first process has reaped it and been reaped,
    # nothing of the run is left. Before that fork there is no PID 1 and killing the
    # first process is enough (PID 1 would get SIGKILL through PDEATHSIG).
    for child in _children(run.pid):
        try:
            pidfd = os.pidfd_open(child)
        except ProcessLookupError:
            continue
        try:
            # The pidfd pins whatever process has this pid now; it is PID 1 if its parent
            # is the first process, which is reaped only after this (run.wait), so its
            # pid cannot have been recycled.
            if _parent_of(child) == run.pid:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                return
        except ProcessLookupError:
            pass
        finally:
            os.close(pidfd)
    try:
        run.kill()
    except ProcessLookupError:
        pass


def _parent_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return 0


def _classify(
    code: int, killed_for: str, out: str, err: str, wall: float, cpu: float, config: SandboxConfig
) -> SandboxResult:
    def result(status: Status, limit: str = "", sig: int | None = None) -> SandboxResult:
        exit_code = None if killed_for or sig is not None else code
        return SandboxResult(status, exit_code, out, err, wall, cpu, limit=limit, signal=sig)

    if killed_for == "wall":
        return result(Status.TIMEOUT, "wall")
    if killed_for == "output":
        return result(Status.LIMIT_EXCEEDED, "output")
    # The namespace's waiters report death by signal N as 128 + N (see
    # namespaces.wait_and_exit_with); a program that exits with 129..192 itself is misread.
    if code < 0 or 128 < code <= 128 + 64:
        sig = -code if code < 0 else code - 128
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu >= config.cpu_time_s):
            return result(Status.TIMEOUT, "cpu", sig)
        if sig == signal.SIGXFSZ:
            return result(Status.LIMIT_EXCEEDED, "file_size", sig)
        return result(Status.CRASHED, "", sig)
    if code == 0:
        return result(Status.PASSED)
    # A non-zero exit after hitting an rlimit looks like any other failure; these
    # messages in the tail of stderr are the evidence we have (a heuristic).
    tail = err[-4000:]
    for needle, limit in _LIMIT_HINTS:
        if needle in tail:
            return result(Status.LIMIT_EXCEEDED, limit)
    return result(Status.FAILED)


def bare_run(argv: Sequence[str]) -> int:
    """A plain subprocess with no isolation: the benchmark's baseline only."""
    return subprocess.run(list(argv), stdin=subprocess.DEVNULL, capture_output=True, check=False).returncode
