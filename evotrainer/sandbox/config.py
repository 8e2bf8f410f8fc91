"""Typed inputs and outputs of one sandboxed run: the limits, the verdict, the captured output.

Kept apart from the machinery (`namespaces.py`, `runner.py`) so that domains can build
configs and read results without importing anything Linux-specific.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Status(enum.StrEnum):
    """The one verdict of a run."""

    PASSED = "passed"
    """The program exited with status 0 within every limit."""
    FAILED = "failed"
    """The program exited with a non-zero status (an exception, a failed assert, exit(1))."""
    TIMEOUT = "timeout"
    """Wall-clock or CPU time ran out; the whole process tree was killed."""
    CRASHED = "crashed"
    """The program died from a signal it did not ask for (SIGSEGV, SIGABRT, ...)."""
    LIMIT_EXCEEDED = "limit_exceeded"
    """Output, memory, processes or file size went over their limit (see `limit`)."""


# Top-level directories the sandbox creates itself; nothing may be mounted over them.
_BUILT_BY_SANDBOX = ("", "work", "tmp", "proc", "dev", "etc", "usr", "bin", "lib", "lib64", "sbin")


@dataclass(frozen=True)
class SandboxConfig:
    """Limits of one run. Defaults suit a unit-test-sized Python program."""

    wall_time_s: float = 10.0
    """Wall-clock budget; on expiry the whole process tree is killed (status timeout)."""
    cpu_time_s: int = 10
    """RLIMIT_CPU per process (soft limit sends SIGXCPU, one second later SIGKILL)."""
    memory_bytes: int = 1 << 30
    """RLIMIT_AS per process: address space, which is larger than resident memory."""
    max_processes: int = 32
    """RLIMIT_NPROC for the run's private uid: processes and threads together."""
    max_output_bytes: int = 1 << 20
    """Cap on stdout and on stderr each; going over kills the run (limit_exceeded)."""
    max_file_bytes: int = 16 << 20
    """RLIMIT_FSIZE: the largest file the program may write."""
    tmpfs_bytes: int = 64 << 20
    """Size of the private root tmpfs that holds /work and /tmp (all the program may write)."""
    max_open_files: int = 64
    python: str = "/usr/bin/python3"
    """Interpreter used by `run_python`; it must live under a read-only bound path (/usr)."""
    ro_mounts: tuple[tuple[str, str], ...] = ()
    """More host directories bound read-only: (host path, path inside the sandbox). For an
    interpreter's environment, say; the sandbox path may not be /work, /tmp or a system
    directory the sandbox builds itself."""

    def __post_init__(self) -> None:
        if self.wall_time_s <= 0 or self.cpu_time_s <= 0:
            raise ValueError("wall_time_s and cpu_time_s must be positive")
        if self.max_processes < 1:
            raise ValueError("max_processes must be at least 1 (the program itself)")
        if self.memory_bytes < 32 << 20:
            raise ValueError("memory_bytes below 32 MiB cannot start a Python interpreter")
        if self.max_output_bytes < 1 or self.max_file_bytes < 1 or self.tmpfs_bytes < 1 << 20:
            raise ValueError("output, file and tmpfs limits must be positive (tmpfs >= 1 MiB)")
        for host, inside in self.ro_mounts:
            top = inside.strip("/").split("/")[0]
            if not host.startswith("/") or not inside.startswith("/") or top in _BUILT_BY_SANDBOX:
                raise ValueError(f"ro_mounts need absolute paths outside {', '.join(_BUILT_BY_SANDBOX)}: "
                                 f"{host!r} -> {inside!r}")  # fmt: skip


@dataclass(frozen=True)
class SandboxResult:
    """What a run produced. `stdout`/`stderr` are decoded with errors replaced."""

    status: Status
    exit_code: int | None
    """Exit status of the program, or None when it was killed by a signal."""
    stdout: str
    stderr: str
    wall_time_s: float
    cpu_time_s: float
    limit: str = ""
    """Which limit or cause ended the run: wall, cpu, output, memory, processes, file_size."""
    signal: int | None = None

    @property
    def passed(self) -> bool:
        return self.status is Status.PASSED
