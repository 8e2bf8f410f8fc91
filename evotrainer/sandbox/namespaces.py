"""The Linux half of the sandbox: namespaces, a private root filesystem and rlimits.

Every run ends up in new mount, network, IPC, UTS and PID namespaces created for it
alone, with a tmpfs as its root that holds only read-only /usr (and the interpreter's
prefix if it lives elsewhere, and the caller's `ro_mounts`), a few device nodes, a
minimal /etc, /tmp, a /proc of its own and the program's /work; the program is PID 2
under the namespace's PID 1 (root, waits), with the run's private uid, no capabilities,
no_new_privs and rlimits, and execs. Two ways lead there, built from the same steps:

- the launcher's (`launcher.py`): `fork_into_new_pid_namespace`, `enter_new_namespaces`,
  `stage_root` and `mount_proc` ahead of the request, `finish_root` and `become_program`
  when it comes;
- the direct path, `prepare_child`, in subprocess's preexec_fn (one more process: the
  forked child stays in the host's PID namespace and waits).

Between fork and exec only system calls on data prepared before the fork: any import,
lock or allocation-heavy work there could deadlock in a multi-threaded parent.
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import signal

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
MS_NOEXEC = 8
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
_OTHER_NAMESPACES = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
_LAST_CAP = 63
_PIVOT_ROOT_SYSCALL = {"x86_64": 155, "aarch64": 41}
_KEYCTL_SYSCALL = {"x86_64": 250, "aarch64": 219}
KEYCTL_JOIN_SESSION_KEYRING = 1
_OPEN_TREE_SYSCALL = 428  # the same number on every architecture (Linux 5.2 and later)
_MOVE_MOUNT_SYSCALL = 429
OPEN_TREE_CLONE = 1
AT_RECURSIVE = 0x8000
AT_FDCWD = -100
MOVE_MOUNT_F_EMPTY_PATH = 4

# Where the private root is assembled. Mounting over /tmp only changes this mount
# namespace; the host's /tmp is untouched and, after pivot_root, unreachable.
_NEW_ROOT = b"/tmp"
_DEVICES = (b"null", b"zero", b"random", b"urandom")

_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: bytes) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what.decode()}: {os.strerror(err)}")


def _mount(source: bytes, target: bytes, fstype: bytes | None, flags: int, data: bytes | None = None) -> None:
    _check(_libc.mount(source, target, fstype, ctypes.c_ulong(flags), data), b"mount " + target)


class ChildPlan:
    """Everything the child needs, encoded by the parent before fork. A plain class, not a
    dataclass: the launcher process imports this module, and dataclasses would bring in
    inspect, ast and re, a third more memory for every fork to copy."""

    __slots__ = ("uid", "tmpfs_bytes", "ro_binds", "etc_files", "work_files", "rlimits")

    def __init__(
        self,
        *,
        uid: int,
        tmpfs_bytes: int,
        ro_binds: tuple[tuple[bytes, bytes], ...],
        etc_files: tuple[tuple[bytes, bytes], ...],
        work_files: tuple[tuple[bytes, bytes, int], ...],
        rlimits: tuple[tuple[int, int, int], ...],
    ) -> None:
        self.uid = uid
        self.tmpfs_bytes = tmpfs_bytes
        self.ro_binds = ro_binds
        """(absolute host directory, absolute path inside) bound read-only, besides /usr."""
        self.etc_files = etc_files
        self.work_files = work_files
        """(path relative to /work, content, mode)."""
        self.rlimits = rlimits


def available() -> str:
    """Empty when this host can run the sandbox, otherwise the reason it cannot."""
    if os.uname().sysname != "Linux":
        return "the sandbox needs Linux namespaces"
    if os.geteuid() != 0:
        return "the sandbox needs root to create namespaces and drop to a private uid"
    if os.uname().machine not in _PIVOT_ROOT_SYSCALL:
        return f"pivot_root syscall number unknown for {os.uname().machine}"
    return ""


def prepare_child(plan: ChildPlan) -> None:
    """preexec_fn body: namespaces, private root, rlimits. Raises OSError on failure.

    This process stays in the host's PID namespace and waits; its child is PID 1 of the
    new one, and PID 1's child is the program, which returns from here ready to exec."""
    # If the parent dies, the run dies with it rather than lingering as an orphan.
    set_parent_death_signal()
    host_mounts = open_mount_namespace()
    _check(_libc.unshare(_OTHER_NAMESPACES | CLONE_NEWPID), b"unshare")
    own_mounts = stage_root()
    finish_root(plan, host_mounts, own_mounts)
    os.close(host_mounts)
    os.close(own_mounts)
    # CLONE_NEWPID applies to children only: the first child is PID 1 of the namespace.
    wait_and_exit_with(os.fork())
    set_parent_death_signal()
    mount_proc()
    # PID 1 ignores signals it has no handler for, so the program runs as PID 2 with
    # ordinary signal semantics, and PID 1's exit makes the kernel kill what it left.
    wait_and_exit_with(os.fork())
    set_parent_death_signal()
    become_program(plan)


def fork_into_new_pid_namespace(own_pid_namespace: int) -> int:
    """os.fork(), the child being PID 1 of a new PID namespace (the launcher's way, which
    needs no process between it and PID 1). `own_pid_namespace` is an open
    /proc/self/ns/pid of the caller, which afterwards forks into its own namespace again."""
    _check(_libc.unshare(CLONE_NEWPID), b"unshare")
    pid = os.fork()
    if pid != 0:
        _check(_libc.setns(own_pid_namespace, CLONE_NEWPID), b"setns")
    return pid


def enter_new_namespaces() -> None:
    """In PID 1 of a new PID namespace (fork_into_new_pid_namespace's child): new mount,
    network, IPC and UTS namespaces too. Needs nothing of the run, so it can happen early."""
    set_parent_death_signal()
    _check(_libc.unshare(_OTHER_NAMESPACES), b"unshare")


def set_parent_death_signal() -> None:
    """SIGKILL when the parent dies. Not inherited across fork: every process of the
    chain sets it for itself."""
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), b"prctl")


def mount_proc() -> None:
    """In PID 1, after build_root: a /proc that shows only this PID namespace."""
    _mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)


def open_mount_namespace() -> int:
    """A descriptor of this process's mount namespace (before stage_root: /proc is the host's)."""
    return os.open(b"/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)


def stage_root() -> int:
    """In a new mount namespace: the part of the private root every run shares, and
    pivot_root into it. Needs nothing of the run, so the launcher's spare does it ahead.

    A tmpfs holding read-only /usr, the merged-/usr symlinks, /dev/null, zero, random,
    urandom and empty /etc, /proc, /tmp and /work; pivot_root, unlike chroot, leaves no
    path back to the host tree once the old root is detached. Returns a descriptor of
    this mount namespace, for finish_root."""
    own_mounts = open_mount_namespace()
    # Stop mount events propagating back to the host before changing anything.
    _mount(b"none", b"/", None, MS_REC | MS_PRIVATE)
    # Sized for the run by finish_root.
    _mount(b"tmpfs", _NEW_ROOT, b"tmpfs", MS_NOSUID | MS_NODEV, b"size=1m,mode=755")
    root = _NEW_ROOT
    os.mkdir(root + b"/usr")
    _mount(b"/usr", root + b"/usr", None, MS_BIND | MS_REC)
    _mount(b"none", root + b"/usr", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    # Debian's merged /usr: /bin, /lib, /lib64, /sbin are symlinks into it.
    for name in (b"bin", b"lib", b"lib64", b"sbin"):
        host = b"/" + name
        if os.path.islink(host):
            os.symlink(os.readlink(host), root + host)
    os.mkdir(root + b"/dev")
    for dev in _DEVICES:
        path = root + b"/dev/" + dev
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o666))
        _mount(b"/dev/" + dev, path, None, MS_BIND)
    for name in (b"etc", b"proc", b"tmp", b"work"):
        os.mkdir(root + b"/" + name)
    os.chmod(root + b"/tmp", 0o1777)
    os.mkdir(root + b"/.oldroot")
    _check(_libc.syscall(_PIVOT_ROOT_SYSCALL[os.uname().machine], root, root + b"/.oldroot"), b"pivot_root")
    os.chdir(b"/")
    _check(_libc.umount2(b"/.oldroot", MNT_DETACH), b"umount2")
    os.rmdir(b"/.oldroot")
    return own_mounts


def finish_root(plan: ChildPlan, host_mounts: int, own_mounts: int) -> None:
    """After stage_root: the run's part of the root. Its tmpfs size, its read-only binds
    (cloned from the host's mount namespace, where their paths mean what the caller
    meant), /etc and the program's files in /work, owned by the run's uid."""
    _mount(b"tmpfs", b"/", b"tmpfs", MS_REMOUNT | MS_NOSUID | MS_NODEV, b"size=%d,mode=755" % plan.tmpfs_bytes)
    for source, inside in plan.ro_binds:
        _bind_from_host(source, inside, host_mounts, own_mounts)
    for rel, content in plan.etc_files:
        _write(b"/etc/" + rel, content, 0o644)
    for rel, content, mode in plan.work_files:
        path = b"/work/" + rel
        os.makedirs(os.path.dirname(path), exist_ok=True)
        _write(path, content, mode)
    for dirpath, dirnames, filenames in os.walk(b"/work"):
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), plan.uid, plan.uid)
    os.chown(b"/work", plan.uid, plan.uid)


def _bind_from_host(source: bytes, inside: bytes, host_mounts: int, own_mounts: int) -> None:
    """Bind host directory `source` read-only at `inside`: a detached copy of its mounts
    is taken in the host's mount namespace (open_tree) and attached here (move_mount)."""
    os.makedirs(inside, exist_ok=True)
    _check(_libc.setns(host_mounts, CLONE_NEWNS), b"setns")
    tree = _libc.syscall(_OPEN_TREE_SYSCALL, AT_FDCWD, source, OPEN_TREE_CLONE | AT_RECURSIVE | os.O_CLOEXEC)
    error = ctypes.get_errno()
    _check(_libc.setns(own_mounts, CLONE_NEWNS), b"setns")
    os.chdir(b"/")
    if tree < 0:
        raise OSError(error, f"open_tree {source.decode(errors='replace')}: {os.strerror(error)}")
    try:
        _check(_libc.syscall(_MOVE_MOUNT_SYSCALL, tree, b"", AT_FDCWD, inside, MOVE_MOUNT_F_EMPTY_PATH), b"move_mount")
    finally:
        os.close(tree)
    _mount(b"none", inside, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def become_program(plan: ChildPlan) -> None:
    """In the program's process (PID 2), root still: its limits, then no privileges."""
    os.chdir(b"/work")
    for which, soft, hard in plan.rlimits:
        resource.setrlimit(which, (soft, hard))
    for cap in range(_LAST_CAP + 1):
        _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the kernel's last cap
    os.setgroups([])
    os.setresgid(plan.uid, plan.uid, plan.uid)
    # Leaving uid 0 in all three ids clears the permitted and effective capabilities.
    os.setresuid(plan.uid, plan.uid, plan.uid)
    join_own_session_keyring()
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), b"prctl")


def join_own_session_keyring() -> None:
    """A session keyring of the program's own. The one inherited is the caller's (under
    systemd or pam_keyinit a real one, which may hold the service's keys) and every run
    would share it. Where keyctl is refused (a container's seccomp profile), the program
    cannot reach any keyring either."""
    if _libc.syscall(_KEYCTL_SYSCALL[os.uname().machine], KEYCTL_JOIN_SESSION_KEYRING, None) < 0:
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EPERM):
            raise OSError(err, f"keyctl: {os.strerror(err)}")


def wait_and_exit_with(pid: int) -> None:
    """In the parent of a fork: close every fd, wait for the child, exit with its status.

    Closing matters: subprocess learns that exec succeeded when the last copy of its
    error pipe closes, and the caller sees end-of-output when the last copy of the
    program's stdout and stderr close; a waiter holding them would hide both. Death by
    signal N is reported as exit status 128 + N, as shells do.
    """
    if pid == 0:
        return
    os.closerange(0, 1 << 16)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    os._exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))


def _write(path: bytes, content: bytes, mode: int) -> None:
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, mode)
    try:
        view = memoryview(content)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
