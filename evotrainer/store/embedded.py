"""An embedded Postgres under EVOTRAINER_HOME, started on demand when no URL is configured.

It uses the machine's Postgres binaries (pg_config, /usr/lib/postgresql/*/bin, or
EVOTRAINER_PG_BIN), listens only on a Unix socket inside a mode-0700 directory (so no
port is taken and only this user can connect; trust auth is safe behind it), and keeps
running after the command that started it, like a user-level daemon.

Postgres refuses to run as root. Rather than create a system user or change permissions
outside our directory, as root we start it inside a user namespace (`unshare --user`)
where our uid is mapped to an unprivileged one: Postgres sees a normal user that owns
its data directory, while the kernel still sees us.
"""

from __future__ import annotations

import fcntl
import glob
import os
import shutil
import subprocess
from pathlib import Path

from evotrainer import config
from evotrainer.errors import DatabaseUnavailableError

DATABASE = "evotrainer"
USER = "evotrainer"
_NAMESPACE_UID = 1000


def _bin_dir() -> Path:
    configured = os.environ.get("EVOTRAINER_PG_BIN")
    if configured:
        return Path(configured)
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False).stdout.strip()
        if out and (Path(out) / "initdb").exists():
            return Path(out)
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))
    for candidate in reversed(candidates):
        if (Path(candidate) / "initdb").exists():
            return Path(candidate)
    raise DatabaseUnavailableError(
        "no Postgres binaries found for the embedded database: install postgresql, set EVOTRAINER_PG_BIN, "
        "or set EVOTRAINER_DATABASE_URL"
    )


def _as_postgres_user(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    if not shutil.which("unshare"):
        raise DatabaseUnavailableError("running as root needs `unshare` to start the embedded Postgres")
    return ["unshare", "--user", f"--map-user={_NAMESPACE_UID}", f"--map-group={_NAMESPACE_UID}", *argv]


class EmbeddedPostgres:
    def __init__(self, root: Path | None = None) -> None:
        self.root = (root or config.home()) / "postgres"
        self.data = self.root / "data"
        self.socket_dir = self.root / "run"
        self.log = self.root / "postgres.log"

    @property
    def url(self) -> str:
        return f"postgresql://{USER}@/{DATABASE}?host={self.socket_dir}"

    def running(self) -> bool:
        return (self.socket_dir / ".s.PGSQL.5432").exists() and self._pg_ctl_status()

    def _pg_ctl_status(self) -> bool:
        result = subprocess.run(
            _as_postgres_user([str(_bin_dir() / "pg_ctl"), "status", "-D", str(self.data)]),
            capture_output=True, check=False,
        )
        return result.returncode == 0

    def ensure_running(self) -> str:
        """Initialise and start the server if needed (serialised by a lock file); return its URL."""
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(self.root / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (self.data / "PG_VERSION").exists():
                self._initdb()
            if not self.running():
                self._start()
        return self.url

    def _run(self, argv: list[str], what: str) -> None:
        result = subprocess.run(_as_postgres_user(argv), capture_output=True, text=True, check=False)
        if result.returncode != 0:
            detail = (result.stderr or result.stdout).strip().splitlines()
            raise DatabaseUnavailableError(f"embedded Postgres: {what} failed: {detail[-1] if detail else '?'}")

    def _initdb(self) -> None:
        if self.data.exists():
            shutil.rmtree(self.data)
        self._run(
            [str(_bin_dir() / "initdb"), "-D", str(self.data), "-U", USER, "--auth=trust", "-E", "UTF8",
             "--locale=C.UTF-8"],
            "initdb",
        )
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write("\n# evotrainer embedded server: Unix socket only\nlisten_addresses = ''\n")
        self.socket_dir.mkdir(mode=0o700, exist_ok=True)
        self._start()
        self._run([str(_bin_dir() / "createdb"), "-h", str(self.socket_dir), "-U", USER, DATABASE], "createdb")

    def _start(self) -> None:
        self.socket_dir.mkdir(mode=0o700, exist_ok=True)
        self._run(
            [str(_bin_dir() / "pg_ctl"), "start", "-w", "-D", str(self.data), "-l", str(self.log),
             "-o", f"-k {self.socket_dir}"],
            "start",
        )

    def stop(self) -> None:
        if (self.data / "PG_VERSION").exists() and self._pg_ctl_status():
            self._run([str(_bin_dir() / "pg_ctl"), "stop", "-w", "-m", "fast", "-D", str(self.data)], "stop")
