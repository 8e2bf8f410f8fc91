"""The launcher: a small process that starts sandboxed runs, so that their forks copy it
and not the caller.

A run needs three processes (see `namespaces.py`), and a fork costs in proportion to
the memory of the process that forks, twice over: copying its page tables, then copying
every page either side writes to. From a worker that has imported a training stack that
is milliseconds per fork. The launcher is a fresh interpreter (`python -I -S`) that
imports only this module and `namespaces`, with the garbage collector off. It serves
one caller process (see `launch.py` for the caller's side), all its threads:

    caller --control socket, one datagram per run: a run socket, the request (a memfd),
           the program's stdin, stdout and stderr--> launcher --the descriptors--> spare

A spare is forked ahead of need, while the previous run goes on: it is already PID 1 of
new PID, mount, network, IPC and UTS namespaces, with the program's process (PID 2)
forked and waiting. It takes exactly one run: builds the private root, mounts /proc and
hands the descriptors to PID 2, which sets the limits, drops privileges and execs, as
`namespaces.prepare_child` does on the direct path. So no namespace is ever shared or
reused: each is created for one run and dies with it.

On the run socket the spare's PID 2 first says `A` (taken), then the launcher answers `P`
(PID 1's pid, with a pidfd, so that the caller's kill can never reach a recycled pid) and,
once it has reaped PID 1, `S` (wait status and CPU seconds of the whole tree); PID 1 or 2
send `E` when setup or exec failed. A fast run's `E` or `S` can come before `P`.
The launcher is single-threaded (its forks are safe) and exits when the caller's end of
the control socket closes; its runs and its spare then die through PDEATHSIG.
"""

from __future__ import annotations

import errno
import gc
import os
import pickle
import resource
import select
import selectors
import signal
import socket
import struct
import time

from evotrainer.sandbox import namespaces

TYPE_CHECKING = False  # typing is not imported at run time: the launcher stays small
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import NoReturn

RUN_FDS = 5
"""Descriptors of a run request: run socket, request memfd, stdin, stdout, stderr."""
PID = struct.Struct("!i")
_MAX_LOST_SPARES = 3
STATUS = struct.Struct("!id")
ERROR = struct.Struct("!ci")
"""`E` frames: the stage that failed (SETUP or EXEC), errno, then the message. Not pickle:
the caller never unpickles what comes back from a run."""
SETUP = b"s"
EXEC = b"x"


def serve(control_fd: int) -> None:
    """The launcher's loop: keep a spare waiting on the control socket; when it takes a
    run, answer `P` and fork the next one; reap runs and answer `S`."""
    # Each fork copies this process's pages as they are written, and a garbage collection
    # in a child would write to every object it tracks: nothing here needs the collector.
    gc.disable()
    gc.freeze()
    own_pid_namespace = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    alive = os.pidfd_open(os.getpid())  # readable once this process has died (see _Spare.fork)
    sel = selectors.DefaultSelector()
    spare: _Spare | None = None
    lost = 0
    while True:
        if spare is None:
            try:
                spare = _Spare.fork(own_pid_namespace, alive, control_fd)
            except OSError:
                # Out of memory, processes or descriptors for a moment (a run's hog, say):
                # a lost spare, not the end of the launcher and of every run it holds.
                lost += 1
                if lost == _MAX_LOST_SPARES:
                    return
                time.sleep(0.1 * lost)
                continue
            sel.register(spare.sock, selectors.EVENT_READ, spare)
        for key, _ in sel.select():
            if isinstance(key.data, _Spare):
                sel.unregister(key.fileobj)
                msg, run = key.data.took()
                if msg == b"G":
                    return  # the caller is gone; our runs follow through PDEATHSIG
                if run is None:
                    # Died before taking a run (killed from outside, or cannot start): try
                    # again, but not forever; without us the caller falls back.
                    lost += 1
                    if lost == _MAX_LOST_SPARES:
                        return
                else:
                    lost = 0
                    _send(run, b"P" + PID.pack(key.data.pid), [key.data.pidfd])
                    sel.register(key.data.pidfd, selectors.EVENT_READ, (key.data.pid, run))
                spare = None
            else:
                # PID 1 has reported already unless it was killed; the caller reads the
                # first `S` and has closed its end by then.
                pid, run = key.data
                _, status, usage = os.wait4(pid, 0)
                _send(run, b"S" + STATUS.pack(status, usage.ru_utime + usage.ru_stime))
                sel.unregister(key.fd)
                os.close(key.fd)
                run.close()


class _Spare:
    """A forked process waiting for one run: PID 1 of fresh PID, mount, network, IPC and
    UTS namespaces, and its child, PID 2, which waits on the control socket. It takes
    exactly one request and never outlives that run."""

    def __init__(self, pid: int, pidfd: int, sock: socket.socket) -> None:
        self.pid = pid
        self.pidfd = pidfd
        self.sock = sock

    @classmethod
    def fork(cls, own_pid_namespace: int, launcher_alive: int, control_fd: int) -> _Spare:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = namespaces.fork_into_new_pid_namespace(own_pid_namespace)
        if pid == 0:
            try:
                _wait_as_spare(control_fd, theirs.fileno(), launcher_alive)
            finally:
                os._exit(127)  # never back into the launcher's loop, whatever happened
        theirs.close()
        # Our child until we reap it, so this pidfd names it for good.
        return cls(pid, os.pidfd_open(pid), ours)

    def took(self) -> tuple[bytes, socket.socket | None]:
        """What the spare said: `T` with the run socket of the run it took, `G` when the
        caller is gone, nothing when it died; in that case it is reaped here."""
        try:
            msg, fds, _, _ = socket.recv_fds(self.sock, 16, 1)
        except OSError:
            msg, fds = b"", []
        self.sock.close()
        if msg[:1] == b"T" and len(fds) == 1:
            return msg, socket.socket(fileno=fds[0])
        for fd in fds:
            os.close(fd)
        if msg != b"G":
            os.wait4(self.pid, 0)
            os.close(self.pidfd)
        return msg, None


def _wait_as_spare(control_fd: int, launcher_fd: int, launcher_alive: int) -> NoReturn:
    """In the spare, PID 1: drop what belongs to the launcher and other runs, enter the new
    namespaces, fork PID 2 to wait for a run, wait for that run's socket, and report."""
    # Only stdin, stdout and stderr (/dev/null) and the three kept here stay open.
    keep = sorted((control_fd, launcher_fd, launcher_alive))
    for low, high in zip([2, *keep], [*keep, os.sysconf("SC_OPEN_MAX")], strict=True):
        os.closerange(low + 1, high)
    host_mounts = -1
    try:
        host_mounts = namespaces.open_mount_namespace()
        namespaces.enter_new_namespaces()
        # PDEATHSIG is set only now: a launcher that died since the fork sent no signal,
        # and this spare must not outlive it.
        if select.select([launcher_alive], [], [], 0)[0]:
            os._exit(0)
        os.close(launcher_alive)
        # The old root as working directory, so that pivot_root moves this process along.
        os.chdir("/")
        to_init, init_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        program = os.fork()
    except BaseException as exc:  # noqa: BLE001 - reported to the run it takes
        _take_run(control_fd, launcher_fd, None, host_mounts, exc)
    if program == 0:
        init_end.close()
        _take_run(control_fd, launcher_fd, to_init, host_mounts, None)
    for fd in (control_fd, launcher_fd, host_mounts):
        os.close(fd)
    to_init.close()
    with init_end:
        _, fds, _, _ = socket.recv_fds(init_end, 16, 1)
    if len(fds) != 1:
        os._exit(0)  # PID 2 took no run (the caller is gone)
    _reap_and_report(program, fds[0])


def _take_run(control_fd: int, launcher_fd: int, to_init: socket.socket | None, host_mounts: int,
              failure: BaseException | None) -> NoReturn:  # fmt: skip
    """In PID 2 (or in PID 1 whose namespaces failed, to report that): build the shared
    part of the root, take one request from the control socket, tell the launcher and
    PID 1, finish the root, set the limits, drop privileges and exec the program."""
    namespaces.set_parent_death_signal()
    own_mounts = -1
    if failure is None:
        try:
            own_mounts = namespaces.stage_root()
            namespaces.mount_proc()
        except BaseException as exc:  # noqa: BLE001 - reported to the run it takes
            failure = exc
    with socket.socket(fileno=control_fd) as control, socket.socket(fileno=launcher_fd) as launcher:
        while True:
            msg, fds, _, _ = socket.recv_fds(control, 16, RUN_FDS)
            if not msg:
                launcher.send(b"G")  # the caller closed its end: it is gone
                os._exit(0)
            if len(fds) == RUN_FDS:
                break
            for fd in fds:
                os.close(fd)
        run_sock, request_fd, *stdio = fds
        # Taken, said first: a caller that never sees `A` knows nothing of the run happened
        # and may start it elsewhere; once it has, it never does (launch.py).
        with socket.socket(fileno=os.dup(run_sock)) as taken:
            _send(taken, b"A")
        socket.send_fds(launcher, [b"T"], [run_sock])
        if to_init is not None:
            socket.send_fds(to_init, [b"R"], [run_sock])
            to_init.close()
    stage = SETUP
    try:
        if failure is not None:
            raise failure
        argv, env, plan = _read_request(request_fd)
        namespaces.finish_root(plan, host_mounts, own_mounts)
        # Python ignores these; ignored signals survive exec (subprocess resets them too).
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(sig, signal.SIG_DFL)
        for target, fd in enumerate(stdio):
            os.dup2(fd, target)
        # Nothing but the program's stdin, stdout, stderr and (close-on-exec) the run
        # socket: not the namespaces' descriptors, not other runs'.
        os.closerange(3, run_sock)
        os.closerange(run_sock + 1, os.sysconf("SC_OPEN_MAX"))
        os.set_inheritable(run_sock, False)
        os.setsid()
        namespaces.become_program(plan)
        stage = EXEC
        _exec(argv, env)
    except BaseException as exc:  # noqa: BLE001 - everything is reported, then the run ends
        _report(run_sock, stage, exc)
    os._exit(127)


def _reap_and_report(program: int, run_sock: int) -> NoReturn:
    """PID 1 once PID 2 took a run: wait for the program, kill and reap whatever it left in
    the namespace, and report at once, without waiting for the namespaces' teardown.

    Only the run socket is open here: a copy of the program's stdout or stderr would hide
    their end from the caller."""
    while True:
        try:
            _, status = os.waitpid(program, 0)
            break
        except InterruptedError:
            continue
    try:
        os.kill(-1, signal.SIGKILL)  # every process of this namespace but PID 1
    except ProcessLookupError:
        pass
    while True:
        try:
            os.waitpid(-1, 0)
        except InterruptedError:
            continue
        except ChildProcessError:
            break
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    _send(socket.socket(fileno=run_sock), b"S" + STATUS.pack(status, usage.ru_utime + usage.ru_stime))
    os._exit(0)


def _exec(argv: list[str], env: dict[str, str]) -> NoReturn:
    """os.execvpe's search of PATH, without its imports: once the root is pivoted, the
    launcher's standard library is out of reach, and an import fails."""
    if "/" in argv[0]:
        os.execve(argv[0], argv, env)
    not_found: OSError = FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), argv[0])
    other: OSError | None = None
    for directory in env.get("PATH", os.defpath).split(":"):
        try:
            os.execve(os.path.join(directory or ".", argv[0]), argv, env)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:  # e.g. permission denied: reported unless a later one runs
            other = other or exc
    raise other or not_found


def _read_request(request_fd: int) -> tuple[list[str], dict[str, str], namespaces.ChildPlan]:
    # pread: PID 1 and PID 2 share the memfd's file offset.
    size = os.fstat(request_fd).st_size
    request: tuple[list[str], dict[str, str], namespaces.ChildPlan] = pickle.loads(os.pread(request_fd, size, 0))
    return request


def _report(run_sock: int, stage: bytes, exc: BaseException) -> None:
    number = exc.errno if isinstance(exc, OSError) and exc.errno is not None else 0
    _send(socket.socket(fileno=run_sock), b"E" + ERROR.pack(stage, number) + str(exc).encode(errors="replace"))


def _send(run: socket.socket, frame: bytes, fds: Sequence[int] = ()) -> None:
    try:
        socket.send_fds(run, [frame], fds, socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)
    except OSError:
        pass  # the caller gave up on this run (it died); nothing to tell
