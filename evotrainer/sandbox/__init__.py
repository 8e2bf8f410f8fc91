"""The sandbox every piece of policy-written (untrusted) code runs in.

What it guarantees, on a Linux host where evotrainer runs as root (see
docs/sandbox_and_domains.md for the full list and the limits):

- no network: a new network namespace with only a down loopback, so no socket reaches
  the database, the broker or anything else, on 127.0.0.1 or elsewhere;
- no host files: a private tmpfs root with read-only /usr only (plus the interpreter's
  prefix when it lives outside /usr, and the read-only `ro_mounts` a caller names); the
  project, the database files, $HOME and the host's /tmp are not in it at all;
- no privileges: a private uid per run, no capabilities, no_new_privs, own PID, IPC and
  UTS namespaces, so it can neither see nor signal host processes;
- bounded: CPU time, address space, processes, file size, open files, output size and
  wall time; on any of them the whole process tree is killed.

It does not filter system calls (no seccomp) and does not bound total memory across a
run's processes with a cgroup: a run may use up to max_processes x memory_bytes.
"""

from __future__ import annotations

# Names are resolved on first use (a module `__getattr__`), so that the launcher process,
# which imports `evotrainer.sandbox.launcher`, does not load the runner and its imports.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from evotrainer.sandbox.config import SandboxConfig, SandboxResult, Status
    from evotrainer.sandbox.runner import SandboxUnavailableError, files_from_dir, run, run_python

from evotrainer.lazy_names import lazy_names  # noqa: E402 (after the TYPE_CHECKING block)

_WHERE = {
    **dict.fromkeys(("SandboxConfig", "SandboxResult", "Status"), "evotrainer.sandbox.config"),
    **dict.fromkeys(("SandboxUnavailableError", "files_from_dir", "run", "run_python"), "evotrainer.sandbox.runner"),
}

__all__ = [
    "SandboxConfig",
    "SandboxResult",
    "SandboxUnavailableError",
    "Status",
    "files_from_dir",
    "run",
    "run_python",
]


__getattr__, __dir__ = lazy_names(__name__, _WHERE)
