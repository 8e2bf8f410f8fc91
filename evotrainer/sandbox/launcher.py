"""A small process that starts sandboxed runs, so that a run's forks copy it, not the caller.

A run forks three times (see `namespaces.py`), and a fork costs in proportion to the
forking process's address space: from a worker that has imported a training stack that
is milliseconds per fork, plus tearing down each copy again. The launcher is a fresh
interpreter that imports only the sandbox. One is started per caller process on first
use and serves all its threads:

    caller --control socket, one datagram per run: a run socket, the request (a memfd),
           the program's stdin, stdout and stderr--> launcher --fork--> the run

The forked run reads its request, calls `namespaces.prepare_child` and execs the
program, exactly as the direct path's preexec_fn does, with the same isolation. On the
run socket the launcher answers `P` (the pid, with a pidfd, so that the caller's kill can
never reach a recycled pid) and, once it has reaped the run, `S` (wait status and CPU
seconds of the whole tree); the run itself sends `E` when setup or exec failed.

The launcher is single-threaded (its forks are safe) and exits when the caller's end of
the control socket closes; the runs it started then die through PDEATHSIG. If it is gone
when a run starts, the caller starts a new one, and runs on the direct path if that fails
too (`runner.py`).
"""

from __future__ import annotations

import os
import pickle
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from evotrainer.sandbox import namespaces

_PROJECT_ROOT = str(Path(__file__).resolve().parents[2])
# -I -S: no site-packages, no user paths; the sandbox needs only the standard library.
_BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from evotrainer.sandbox.launcher import serve; serve(int(sys.argv[2]))"
_RUN_FDS = 5  # run socket, request memfd, stdin, stdout, stderr
_PID = struct.Struct("!i")
_STATUS = struct.Struct("!id")
_FRAME_BYTES = 65536


class LauncherGone(Exception):
    """The launcher did not take the run (it died or could not start): nothing ran."""


class RunSetupError(Exception):
    """The run's namespaces, root or limits could not be set up (the run never executed)."""


# --- the launcher process -------------------------------------------------------------


def serve(control_fd: int) -> None:
    """The launcher's loop: fork a run per request, report its pid and, when reaped, its status."""
    control = socket.socket(fileno=control_fd)
    sel = selectors.DefaultSelector()
    sel.register(control, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select():
            if key.fileobj is control:
                msg, fds, _, _ = socket.recv_fds(control, 16, _RUN_FDS)
                if not msg:
                    return  # the caller is gone; our runs follow through PDEATHSIG
                if len(fds) != _RUN_FDS:
                    for fd in fds:
                        os.close(fd)
                    continue
                _fork_run(sel, socket.socket(fileno=fds[0]), fds[1], fds[2:])
            else:
                pid, run = key.data
                _, status, usage = os.wait4(pid, 0)
                _send(run, b"S" + _STATUS.pack(status, usage.ru_utime + usage.ru_stime))
                sel.unregister(key.fd)
                os.close(key.fd)
                run.close()


def _fork_run(sel: selectors.BaseSelector, run: socket.socket, request_fd: int, stdio: list[int]) -> None:
    pid = os.fork()
    if pid == 0:
        _start_run(run.fileno(), request_fd, stdio)
    for fd in (request_fd, *stdio):
        os.close(fd)
    # Our child until we reap it, so this pidfd names the run's first process for good.
    pidfd = os.pidfd_open(pid)
    _send(run, b"P" + _PID.pack(pid), [pidfd])
    sel.register(pidfd, selectors.EVENT_READ, (pid, run))


def _send(run: socket.socket, frame: bytes, fds: Sequence[int] = ()) -> None:
    try:
        socket.send_fds(run, [frame], fds, socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)
    except OSError:
        pass  # the caller gave up on this run (it died); nothing to tell


def _start_run(run_sock: int, request_fd: int, stdio: list[int]) -> NoReturn:
    """In the forked run: close what belongs to other runs, read the request, isolate, exec."""
    stage = "setup"
    try:
        # Python ignores these; ignored signals survive exec (subprocess resets them too).
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(sig, signal.SIG_DFL)
        for target, fd in enumerate(stdio):
            os.dup2(fd, target)
        keep = sorted({run_sock, request_fd})
        os.closerange(3, keep[0])
        os.closerange(keep[0] + 1, keep[1])
        os.closerange(keep[1] + 1, os.sysconf("SC_OPEN_MAX"))
        os.set_inheritable(run_sock, False)
        with os.fdopen(request_fd, "rb") as f:
            argv, env, plan = pickle.load(f)
        os.setsid()
        namespaces.prepare_child(plan)
        stage = "exec"
        os.execvpe(argv[0], argv, env)
    except BaseException as exc:  # noqa: BLE001 - everything is reported, then the run ends
        errno = exc.errno if isinstance(exc, OSError) else 0
        _send(socket.socket(fileno=run_sock), b"E" + pickle.dumps((stage, errno, str(exc))))
    finally:
        os._exit(127)


# --- the caller's side ----------------------------------------------------------------


@dataclass
class LaunchedRun:
    """A run the launcher started: its first process's pid and pidfd, and its run socket."""

    pid: int
    pidfd: int
    sock: socket.socket
    argv0: str

    def alive(self) -> bool:
        """The first process has not been reaped (so `pid` still names it)."""
        try:
            signal.pidfd_send_signal(self.pidfd, 0)
        except ProcessLookupError:
            return False
        return True

    def kill(self) -> None:
        signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)

    def wait(self) -> tuple[int, float]:
        """(wait status, CPU seconds of the tree) once the launcher reaped the run.

        Raises OSError when the program could not be executed (as subprocess does),
        RunSetupError when its sandbox could not be set up, LauncherGone when the
        launcher died before reporting.
        """
        error = None
        try:
            while True:
                frame = self.sock.recv(_FRAME_BYTES)
                if not frame:
                    raise LauncherGone("the sandbox launcher died during the run")
                if frame[:1] == b"E":
                    error = pickle.loads(frame[1:])
                elif frame[:1] == b"S":
                    status, cpu = _STATUS.unpack(frame[1:])
                    break
        finally:
            self.close()
        if error is not None:
            stage, errno, message = error
            if stage == "exec":
                raise OSError(errno, os.strerror(errno), self.argv0)
            raise RunSetupError(message)
        return status, cpu

    def close(self) -> None:
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
        self.sock.close()


class Launcher:
    """The caller's handle on one launcher process."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _BOOT, _PROJECT_ROOT, str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,  # a Ctrl-C meant for the caller is not for it
            )
        self.control = ours
        self.owner = os.getpid()

    def start(self, argv: Sequence[str], env: Mapping[str, str], plan: namespaces.ChildPlan,
              stdio: tuple[int, int, int]) -> LaunchedRun:  # fmt: skip
        """Hand a run to the launcher; raises LauncherGone if it did not take it."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        request = os.memfd_create("sandbox-request", os.MFD_CLOEXEC)
        try:
            with os.fdopen(os.dup(request), "wb") as f:
                pickle.dump((list(argv), dict(env), plan), f, protocol=pickle.HIGHEST_PROTOCOL)
            os.lseek(request, 0, os.SEEK_SET)
            try:
                socket.send_fds(self.control, [b"R"], [theirs.fileno(), request, *stdio], socket.MSG_NOSIGNAL)
            except OSError as exc:
                raise LauncherGone(f"the sandbox launcher is gone: {exc}") from exc
        finally:
            theirs.close()
            os.close(request)
        try:
            msg, fds, _, _ = socket.recv_fds(ours, _FRAME_BYTES, 1)
        except OSError as exc:
            ours.close()
            raise LauncherGone(f"the sandbox launcher is gone: {exc}") from exc
        if msg[:1] != b"P" or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            ours.close()
            raise LauncherGone("the sandbox launcher died before starting the run")
        (pid,) = _PID.unpack(msg[1:])
        return LaunchedRun(pid=pid, pidfd=fds[0], sock=ours, argv0=argv[0])

    def stop(self) -> None:
        self.control.close()
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


_lock = threading.Lock()
_current: Launcher | None = None
_inherited: list[Launcher] = []


def current() -> Launcher:
    """This process's launcher, started on first use (one per process, shared by threads)."""
    global _current
    with _lock:
        if _current is None or _current.owner != os.getpid():
            _current = Launcher()
        return _current


def replace(gone: Launcher) -> Launcher:
    """A new launcher in place of one that did not take a run (unless a thread did so already)."""
    global _current
    with _lock:
        if _current is gone:
            gone.stop()
            _current = None
        if _current is None:
            _current = Launcher()
        return _current


def _forget_after_fork() -> None:
    # A forked child starts its own launcher: it must not hold its parent's control
    # socket (which keeps that launcher alive) nor a lock another thread held at the
    # fork. Only system calls here, which is safe between fork and exec too; the old
    # handle is kept, not collected, since its process is the parent's to reap.
    global _lock, _current
    _lock = threading.Lock()
    if _current is not None:
        os.close(_current.control.detach())
        _inherited.append(_current)
    _current = None


os.register_at_fork(after_in_child=_forget_after_fork)
