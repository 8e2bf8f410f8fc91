"""With no URL configured, an embedded Postgres starts on demand under EVOTRAINER_HOME."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from tests.test_cli import run


@pytest.mark.slow
def test_embedded_server_starts_on_demand_and_stops(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k != "EVOTRAINER_DATABASE_URL"}
    env["EVOTRAINER_HOME"] = str(home)
    home_mode_before = stat.S_IMODE(tmp_path.stat().st_mode)
    try:
        created = run(env, "experiment", "create", "local")
        assert created.returncode == 0, created.stderr
        status = json.loads(run(env, "db", "status", "--json").stdout)
        assert status["embedded"] and status["up_to_date"] and status["events"] == 1
        assert str(home) in status["url"]
        run_dir = home / "postgres" / "run"
        assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700  # only we can reach the socket
        assert stat.S_IMODE(tmp_path.stat().st_mode) == home_mode_before  # nothing outside touched
        # A second command reuses the running server.
        assert run(env, "audit").stdout.startswith("intact: 1 branches, 1 events")
    finally:
        stopped = run(env, "db", "stop")
    assert stopped.returncode == 0, stopped.stderr
    pids = subprocess.run(["pgrep", "-f", str(home)], capture_output=True, text=True, check=False).stdout.split()
    assert pids == []
