"""Fixtures for the fleet's tests: real brokers, real worker and dispatcher processes.

Every run uses its own queue prefix, so concurrent runs on one broker never take each
other's messages, and its queues are deleted afterwards. Tests that need a broker fail
(never skip) when it is unreachable and CI=true. Processes are started by these
fixtures and stopped by their PID, nothing else.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conftest import IN_CI
from tests.processes import end_process, end_processes

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("EVOTRAINER_TEST_REDIS_URL", "redis://127.0.0.1:6379/11")
AMQP_URL = os.environ.get("EVOTRAINER_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
BROKERS = {"redis": REDIS_URL, "amqp": AMQP_URL}
from evotrainer.fleet.config import QUEUES  # noqa: E402


def require_broker(url: str) -> None:
    host_port = url.split("://", 1)[1].rsplit("@", 1)[-1].split("/", 1)[0]
    host, _, port = host_port.partition(":")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        message = f"broker {host}:{port} is not reachable: {exc}"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


def purge(url: str, prefix: str) -> None:
    """Delete this run's queues (and, on Redis, its unacknowledged messages)."""
    if url.startswith("redis"):
        import redis

        client = redis.Redis.from_url(url)
        for key in client.scan_iter(match=f"{prefix}*"):
            client.delete(key)
        for tag, raw in client.hscan_iter("unacked"):
            try:
                routing_key = json.loads(raw)[2]
            except (ValueError, IndexError, TypeError):
                continue
            if str(routing_key).startswith(prefix):
                client.hdel("unacked", tag)
                client.zrem("unacked_index", tag)
        client.close()
        return
    from kombu import Connection

    with Connection(url) as conn:
        channel = conn.default_channel
        for queue in QUEUES:
            channel.queue_delete(f"{prefix}{queue}")
            channel.exchange_delete(f"{prefix}{queue}")


@dataclass
class Fleet:
    """A fleet for one test: its environment, processes and database."""

    broker: str
    env: dict[str, str]
    database_url: str
    logs: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        name = f"{args[0]}-{len(self.procs)}"
        log = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115 (closed with the process)
        proc = subprocess.Popen([sys.executable, "-m", "evotrainer", *args], cwd=ROOT,
                                env={**self.env, **(env or {})}, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def worker(self, *args: str) -> subprocess.Popen[bytes]:
        return self.start("worker", "--queues", "rollout,diagnose,control", "--loglevel", "info", *args)

    def dispatcher(self, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        return self.start("dispatcher", env=env)

    def stop(self, proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
        end_process(proc, sig=sig)

    def query(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()

    def wait_for(self, check: Callable[[], Any], what: str, timeout: float = 150) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = check()
            if result:
                return result
            time.sleep(0.2)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{self.tail_logs()}")

    def outcomes(self) -> dict[str, list[tuple[str, dict[str, Any]]]]:
        rows = self.query("SELECT type, payload FROM events WHERE type IN ('TaskCompleted', 'TaskFailed')"
                          " ORDER BY position")
        found: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for type_, payload in rows:
            found.setdefault(payload["task_id"], []).append((type_, payload))
        return found

    def wait_finished(self, task_ids: list[str], timeout: float = 150) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            found = self.outcomes()
            return found if all(t in found for t in task_ids) else None

        return self.wait_for(check, f"outcomes of {task_ids}", timeout)

    def tail_logs(self, lines: int = 25) -> str:
        out = []
        for path in sorted(self.logs.glob("*.log")):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(out)


def _fleet(broker: str, database_url: str, tmp_path: Path) -> Iterator[Fleet]:
    url = BROKERS[broker]
    require_broker(url)
    prefix = f"evotest-{uuid.uuid4().hex[:10]}-"
    env = dict(os.environ)
    env.update({
        "EVOTRAINER_DATABASE_URL": database_url,
        "EVOTRAINER_HOME": str(tmp_path / "home"),
        "EVOTRAINER_BROKER_URL": url,
        "EVOTRAINER_QUEUE_PREFIX": prefix,
        "EVOTRAINER_TASK_MODULES": "tests.fleet.kinds",
        # Short leases so that crashed workers are noticed within seconds.
        "EVOTRAINER_LEASE_SECONDS": "4",
        "EVOTRAINER_HEARTBEAT_SECONDS": "0.5",
        "EVOTRAINER_DISPATCH_POLL_SECONDS": "0.1",
        "EVOTRAINER_RETRY_BACKOFF_SECONDS": "0.5",
        "PYTHONUNBUFFERED": "1",
    })
    logs = tmp_path / "logs"
    logs.mkdir()
    fleet = Fleet(broker, env, database_url, logs)
    try:
        yield fleet
    finally:
        end_processes(fleet.procs)
        purge(url, prefix)


@pytest.fixture(params=sorted(BROKERS))
def any_fleet(request: pytest.FixtureRequest, database_url: str, tmp_path: Path) -> Iterator[Fleet]:
    """A fleet on each broker in turn."""
    yield from _fleet(request.param, database_url, tmp_path)


@pytest.fixture
def redis_fleet(database_url: str, tmp_path: Path) -> Iterator[Fleet]:
    yield from _fleet("redis", database_url, tmp_path)


@pytest.fixture
def amqp_fleet(database_url: str, tmp_path: Path) -> Iterator[Fleet]:
    yield from _fleet("amqp", database_url, tmp_path)
