"""The fleet's commands at the CLI edge: clear one-line errors, no tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.fleet.conftest import ROOT


def fleet_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "evotrainer", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("args", "message"), [
    (["tasks", "--state", "sleeping"], "unknown state(s) sleeping; states are requested, queued, running"),
    (["worker", "--queues", "gpu"], "unknown queue(s) gpu; the fleet's queues are train, rollout"),
    (["worker", "--pool", "gevent"], "--pool must be one of threads, solo, prefork"),
    (["worker", "--pool", "solo", "--concurrency", "2"], "the solo pool runs one task at a time"),
])
def test_bad_usage_is_one_line(cli_env: dict[str, str], args: list[str], message: str) -> None:
    result = fleet_cli({**cli_env, "EVOTRAINER_BROKER_URL": "redis://127.0.0.1:6379/11"}, *args)
    assert result.returncode == 2
    assert result.stderr.startswith(f"evotrainer: error: {message}"), result.stderr
    assert "Traceback" not in result.stderr


def test_a_visibility_timeout_shorter_than_the_longest_task_is_refused(cli_env: dict[str, str]) -> None:
    env = {**cli_env, "EVOTRAINER_BROKER_URL": "redis://127.0.0.1:6379/11", "EVOTRAINER_VISIBILITY_TIMEOUT": "3600"}
    result = fleet_cli(env, "worker")
    assert result.returncode == 2
    assert "must exceed the longest task (43200s)" in result.stderr


def test_tasks_on_an_empty_store(cli_env: dict[str, str]) -> None:
    result = fleet_cli(cli_env, "tasks", "--json")
    assert (result.returncode, json.loads(result.stdout)) == (0, [])
