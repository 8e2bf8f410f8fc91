"""One real tiny search for every dashboard test: `evotrainer run examples/digits.toml`
(the tiny policy on digit addition, three candidates, about half a minute on 2 cores)
into a database of its own, and its artifacts under a home of its own. Tests read it;
the few that append make their own experiments or branches, never touching `digits`."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import create_database, drop_database, url_for

ROOT = Path(__file__).resolve().parents[2]
EVOTRAINER = str(ROOT / ".venv" / "bin" / "evotrainer")


@dataclass(frozen=True)
class Seeded:
    url: str
    home: Path
    env: dict[str, str]

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([EVOTRAINER, *args], env=self.env, capture_output=True, text=True, check=False)


@pytest.fixture(scope="session")
def seeded(template_database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    name = create_database(template_database)
    home = tmp_path_factory.mktemp("ui-home")
    env = {**os.environ, "EVOTRAINER_DATABASE_URL": url_for(name), "EVOTRAINER_HOME": str(home),
           "EVOTRAINER_ACTOR": "ui-test", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("EVOTRAINER_ARTIFACTS", None)
    env.pop("EVOTRAINER_BROKER_URL", None)
    seeded = Seeded(url_for(name), home, env)
    ran = seeded.cli("run", str(ROOT / "examples" / "digits.toml"))
    assert ran.returncode == 0, ran.stderr[-2000:]
    yield seeded
    drop_database(name)


@pytest.fixture(autouse=True)
def _artifacts_of_the_run(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-process app reads the run's artifacts (rollout evidence) where it stored them."""
    if "seeded" in request.fixturenames:
        seeded: Seeded = request.getfixturevalue("seeded")
        monkeypatch.setenv("EVOTRAINER_HOME", str(seeded.home))
        monkeypatch.delenv("EVOTRAINER_ARTIFACTS", raising=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def server(seeded: Seeded) -> Iterator[str]:
    """`evotrainer ui` as a user starts it, on a free loopback port; yields its base URL."""
    port = free_port()
    process = subprocess.Popen([EVOTRAINER, "ui", "--port", str(port), "--poll-ms", "300"], env=seeded.env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until_listening(port, process)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def wait_until_listening(port: int, process: subprocess.Popen[str], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.stderr.write(process.stderr.read() if process.stderr else "")
            raise AssertionError(f"evotrainer ui exited with {process.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"evotrainer ui did not listen on {port} within {timeout_s} s")
