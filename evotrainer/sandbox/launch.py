"""The caller's side of the launcher (`launcher.py`): start it, hand it runs, read what it reports.

One launcher per caller process, started on first use and shared by all its threads. A
process forked from the caller starts its own. The spare that takes a run says so first
(`A` on the run socket), before anything of the run can happen. Without that `A` (the
control socket is closed, or the run socket closes or stays silent) the run has not
started: the caller tries once more, with the same launcher if its process is alive (its
spare was lost) or a new one, and then runs on the direct path (`runner.py`). After it,
the run may have executed, so it is never started again (RunInDoubt): a program must not
run twice, its output joined to its first run's.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from evotrainer.sandbox import namespaces
from evotrainer.sandbox.launcher import ERROR, EXEC, PID, STATUS

_PROJECT_ROOT = str(Path(__file__).resolve().parents[2])
# -I -S: no site-packages, no user paths; the launcher needs only the standard library.
_BOOT = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from evotrainer.sandbox import launcher; launcher.serve(int(sys.argv[2]))"
)
_FRAME_BYTES = 65536
_GONE_WAIT_S = 10.0
START_TIMEOUT_S = 30.0
"""How long a launcher may take to say it started a run. Starting one takes milliseconds
(its spare is forked ahead); a launcher silent this long is stuck (stopped, or starved of
memory), so it is killed rather than left to block its caller."""


class LauncherGone(Exception):
    """The launcher is gone: before it took the run (nothing ran) or during it (the run
    was killed with it)."""


class RunInDoubt(Exception):
    """The spare took the run (`A`), then the launcher died or did not answer in time: the
    program may have run, so the run is lost, never started again elsewhere."""


class RunSetupError(Exception):
    """The run's namespaces, root or limits could not be set up (the run never executed)."""


@dataclass
class LaunchedRun:
    """A run the launcher started: the host pid and a pidfd of its PID 1, and its run socket."""

    pid: int
    pidfd: int
    sock: socket.socket
    argv0: str
    early: list[bytes]
    """Frames the run sent before the launcher's `P` (it ended, or failed, that fast)."""

    def kill(self) -> None:
        signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)

    def ended(self, timeout: float) -> bool:
        """Waits up to `timeout` seconds for PID 1 to end (it ends once it has reported)."""
        return ended_within(self.pidfd, timeout)

    def wait(self) -> tuple[int, float]:
        """(wait status, CPU seconds of the tree) once PID 1 reaped the program's tree, or
        the launcher reaped PID 1 (when it was killed).

        Raises OSError when the program could not be executed (as subprocess does),
        RunSetupError when its sandbox could not be set up, LauncherGone when the
        launcher died before reporting.
        """
        error: bytes | None = None
        try:
            while True:
                frame = self.early.pop(0) if self.early else self.sock.recv(_FRAME_BYTES)
                if not frame:
                    # PID 1 died with the launcher (PDEATHSIG). Its pidfd turns readable
                    # only once the kernel has killed the rest of its namespace.
                    select.select([self.pidfd], [], [], _GONE_WAIT_S)
                    raise LauncherGone("the sandbox launcher died during the run")
                if frame[:1] == b"E":
                    error = frame[1:]
                elif frame[:1] == b"S":
                    status, cpu = STATUS.unpack(frame[1:])
                    break
        finally:
            self.close()
        if error is not None:
            stage, errno = ERROR.unpack_from(error)
            if stage == EXEC:
                raise OSError(errno, os.strerror(errno), self.argv0)
            raise RunSetupError(error[ERROR.size :].decode(errors="replace"))
        return status, cpu

    def close(self) -> None:
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
        self.sock.close()


def ended_within(pidfd: int, timeout: float) -> bool:
    """Waits up to `timeout` seconds for the process of `pidfd` to end; whether it did."""
    return bool(select.select([pidfd], [], [], max(timeout, 0.0))[0])


def _receive(sock: socket.socket) -> tuple[bytes, list[int]]:
    """One frame and the descriptor it carries, close-on-exec from the start (socket.recv_fds
    cannot ask for that): a child another thread spawns meanwhile must not inherit a run's
    pidfd."""
    msg, ancillary, _, _ = sock.recvmsg(_FRAME_BYTES, socket.CMSG_SPACE(4), socket.MSG_CMSG_CLOEXEC)
    fds: list[int] = []
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.extend(int.from_bytes(data[i : i + 4], sys.byteorder) for i in range(0, len(data) - 3, 4))
    return msg, fds


class Launcher:
    """The caller's handle on one launcher process."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _BOOT, _PROJECT_ROOT, str(theirs.fileno())],
                # Nothing of the caller's: every spare and PID 1 would hold it open.
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,  # a Ctrl-C meant for the caller is not for it
            )
        self.control = ours
        self.owner = os.getpid()

    def start(self, argv: Sequence[str], env: Mapping[str, str], plan: namespaces.ChildPlan,
              stdio: tuple[int, int, int]) -> LaunchedRun:  # fmt: skip
        """Hand a run to the launcher; raises LauncherGone if it did not take it (the run did
        not start), RunInDoubt if it took it and then failed to start it (it may have run)."""
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
            return self._started(ours, argv[0])
        except BaseException:
            ours.close()
            raise

    def _started(self, ours: socket.socket, argv0: str) -> LaunchedRun:
        """Read the run socket until the launcher's `P`. Frames the run sent first (it can
        end before the launcher gets to answer) are kept for LaunchedRun.wait."""
        taken, early = False, []
        ours.settimeout(START_TIMEOUT_S)
        while True:
            try:
                msg, fds = _receive(ours)
            except TimeoutError as exc:
                self.process.kill()  # its spare, and anything it started, die with it
                self.process.wait()  # so that `replace` sees it gone and starts another
                lost = f"the sandbox launcher did not answer in {START_TIMEOUT_S:g} s; killed it"
                raise (RunInDoubt(lost) if taken else LauncherGone(lost)) from exc
            except OSError as exc:
                msg, fds = b"", []
                if not taken:
                    raise LauncherGone(f"the sandbox launcher is gone: {exc}") from exc
            kind = msg[:1]
            if kind == b"P" and len(fds) == 1 and taken:
                break
            for fd in fds:
                os.close(fd)
            if kind == b"A":
                taken = True
            elif kind in (b"E", b"S") and taken:
                early.append(msg)
            elif taken:
                raise RunInDoubt("the sandbox launcher died while starting the run")
            else:
                raise LauncherGone("the sandbox launcher died before taking the run")
        ours.settimeout(None)  # the run's own limits bound the wait for its end
        (pid,) = PID.unpack(msg[1:])
        return LaunchedRun(pid=pid, pidfd=fds[0], sock=ours, argv0=argv0, early=early)

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


def replace(failed: Launcher) -> Launcher:
    """The launcher to try again after `failed` did not take a run: the same one if its
    process is alive (its spare was lost, it forks another), else a new one."""
    global _current
    with _lock:
        if _current is failed and failed.process.poll() is not None:
            failed.stop()
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
