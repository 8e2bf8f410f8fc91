"""Workers on other hosts: a dispatcher, two workers and the `evotrainer run` client, each in
a network namespace of its own (tests/fleet/hosts.py) with its own EVOTRAINER_HOME and no
shared filesystem, reaching Postgres and Redis through relays on the bridge and the S3
server (moto) on the bridge's address. The run's lineage and artifacts must equal those of
the same run in one process with a local artifact store.

Both runs start from the tiny policy. Its warm start (225 SFT steps, most of a minute) is a
cache of deterministic work kept under a ref in the artifact store: the CI version builds it
in the in-process run and uploads that cache to the bucket, as an operator would seed a new
store; everything the run itself computes (trained policies, rollout evidence, evaluation
results) the workers compute. `make hosts` runs the long version (EVOTRAINER_HOSTS_LONG=1):
no seeding (a worker warm-starts the policy from nothing), two candidates of 4 steps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from evotrainer.artifacts import ArtifactStore, open_store
from evotrainer.artifacts.references import referenced_artifacts
from evotrainer.fleet.replay import first_difference
from evotrainer.store import EventStore, StoredEvent
from tests.conftest import IN_CI, create_database, drop_database, url_for
from tests.fleet.conftest import REDIS_URL, ROOT, purge, require_broker
from tests.fleet.hosts import Network, netns_available
from tests.s3server import s3_server

LONG = os.environ.get("EVOTRAINER_HOSTS_LONG") == "1"
VOLATILE = frozenset({"wall_seconds", "cpu_seconds", "gpu_seconds", "duration_s", "environment", "worker",
                      "fork_hash", "event_id"})  # fmt: skip
"""What may differ between two runs of the same work: time taken, where it ran, and what
names events (ids are time-ordered UUIDs; the hash chain covers when and by whom)."""


def _seed_cache(local: ArtifactStore, remote: ArtifactStore) -> list[str]:
    """Copy the store's cache refs (the tiny warm start) and what they point at."""
    names = [rel.removeprefix("refs/") for rel in local.backend.list("refs")]
    for name in names:
        sha = local.get_ref(name)
        assert sha is not None
        members = local.manifest(sha) if local.is_dir(sha) else []
        for _path, _size, member in members:
            remote.put_bytes(local.get(member))
        assert remote.put_bytes(local.get(sha)) == sha
        remote.set_ref(name, sha)
    return names


def _config(path: Path, policy: str) -> Path:
    steps, iterations, k, tasks = (4, 2, 4, 16) if LONG else (2, 1, 2, 4)
    path.write_text(f"""name = "hosts"
domain = "math:digit_add"
policy = "{policy}"
iterations = {iterations}

[harness.grpo]
max_steps = {steps}
num_generations = 4
prompts_per_step = 2

[harness.evaluation]
k = {k}
eval_tasks = {tasks}
""")
    return path


def _lineage(database_url: str) -> list[tuple[str, str, int, str, Any]]:
    """Every event of the run, without what may differ between runs of the same work."""
    with EventStore.connect(database_url, actor="test") as store:
        events: list[StoredEvent] = []
        for info in store.branches("hosts"):
            events += [e for e in store.read_branch(info.ref) if e.branch == info.ref.branch]
    return sorted((e.experiment, e.branch, e.seq, e.type, _stable(e.payload)) for e in events)


def _stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


@pytest.fixture
def two_databases() -> Iterator[tuple[str, str]]:
    from evotrainer.store import migrate

    names = [create_database(), create_database()]
    try:
        for name in names:
            migrate.upgrade(url_for(name))
        yield url_for(names[0]), url_for(names[1])
    finally:
        for name in names:
            drop_database(name)


@pytest.mark.slow
def test_a_run_on_workers_in_other_namespaces_equals_one_in_process(
    two_databases: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    why = netns_available()
    if why is not None:
        (pytest.fail if IN_CI else pytest.skip)(f"cannot make network namespaces here: {why}")
    require_broker(REDIS_URL)
    local_db, fleet_db = two_databases
    python = [sys.executable, "-m", "evotrainer"]
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("EVOTRAINER_", "AWS_"))}
    base_env["PYTHONPATH"] = str(ROOT)

    # In one process, with a local artifact store.
    local_home = tmp_path / "local-home"
    config = _config(tmp_path / "hosts.toml", "tiny")
    local_env = {**base_env, "EVOTRAINER_DATABASE_URL": local_db, "EVOTRAINER_HOME": str(local_home)}
    if os.environ.get("EVOTRAINER_TINY_CACHE"):  # the run's warm starts (tests/conftest.py); the hosts see none
        local_env["EVOTRAINER_TINY_CACHE"] = os.environ["EVOTRAINER_TINY_CACHE"]
    local = subprocess.run([*python, "run", str(config)], env=local_env, cwd=ROOT, capture_output=True,
                           text=True, timeout=1200)
    assert local.returncode == 0, local.stdout + local.stderr[-2000:]

    logs = tmp_path / "logs"
    logs.mkdir()
    prefix = f"evotest-{uuid.uuid4().hex[:10]}-"
    with Network(tmp_path / "net") as net, s3_server(host=net.gateway, log=logs / "s3.log") as s3:
        db_address = net.relay(5432)
        redis_address = net.relay(6379)
        store = open_store(s3.url("fleet"))
        env = {**base_env, **s3.env,
               "EVOTRAINER_DATABASE_URL": fleet_db.replace("127.0.0.1:5432", db_address),
               "EVOTRAINER_BROKER_URL": REDIS_URL.replace("127.0.0.1:6379", redis_address),
               "EVOTRAINER_QUEUE_PREFIX": prefix, "EVOTRAINER_ARTIFACTS": store.location,
               "EVOTRAINER_DISPATCH_POLL_SECONDS": "0.1", "PYTHONUNBUFFERED": "1"}  # fmt: skip
        for key, value in s3.env.items():  # this process reads the bucket too (and seeds it)
            monkeypatch.setenv(key, value)
        if not LONG:
            assert _seed_cache(open_store(local_home / "artifacts"), store)
        try:
            hosts = {name: net.host(name) for name in ("dispatcher", "worker-a", "worker-b", "client")}
            hosts["dispatcher"].start([*python, "dispatcher"], env, open(logs / "dispatcher.log", "wb"), ROOT)
            for name in ("worker-a", "worker-b"):
                hosts[name].start([*python, "worker", "--concurrency", "1", "--loglevel", "info"], env,
                                  open(logs / f"{name}.log", "wb"), ROOT)
            client = hosts["client"].start([*python, "run", str(config)], env, open(logs / "run.log", "wb"), ROOT)
            deadline = time.monotonic() + 1200
            while client.poll() is None and time.monotonic() < deadline:
                time.sleep(0.5)
            output = (logs / "run.log").read_text(errors="replace")
            tails = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}" for p in sorted(logs.iterdir()))
            assert client.returncode == 0, tails
            audited = hosts["client"].start([*python, "audit", "--artifacts"], env, open(logs / "audit.log", "wb"), ROOT)
            assert audited.wait(timeout=300) == 0, (logs / "audit.log").read_text()
            listed = hosts["client"].start([*python, "tasks"], env, open(logs / "tasks.log", "wb"), ROOT)
            assert listed.wait(timeout=120) == 0, (logs / "tasks.log").read_text()
            # Each artifact the events name is in the bucket under its hash, the same ones
            # as in one process.
            with EventStore.connect(fleet_db, actor="test") as fleet, EventStore.connect(local_db, actor="test") as one:
                ids = set(referenced_artifacts(fleet.read_all(limit=100_000)))
                assert ids == set(referenced_artifacts(one.read_all(limit=100_000))) and ids
            assert store.audit(sorted(ids)) == dict.fromkeys(sorted(ids), "ok")
        finally:
            net.close()
            purge(REDIS_URL, prefix)
        # Each host wrote only to its own disk: the shared mount point stayed empty, and
        # each worker that ran a task kept its own checkpoint cache.
        assert not any((tmp_path / "net" / "own").iterdir())
        caches = sorted(h.name for h in hosts.values() if (h.files / "home" / "cache" / "checkouts").is_dir())
        assert caches and set(caches) <= {"worker-a", "worker-b"}, caches

        # The same lineage, event for event, as the run in one process.
        fleet_lineage, local_lineage = _lineage(fleet_db), _lineage(local_db)
        assert [e[:4] for e in fleet_lineage] == [e[:4] for e in local_lineage]
        differences = [f"{b}@{seq} {t}: {first_difference(x, y)}" for (_, b, seq, t, x), (*_, y)
                       in zip(local_lineage, fleet_lineage, strict=True) if x != y]  # fmt: skip
        assert differences == []
        assert _printed(output) == _printed(local.stdout)
        # Every task ran on the workers' hosts.
        with psycopg.connect(fleet_db) as conn:
            workers = {row[0] for row in conn.execute(
                "SELECT payload->>'worker' FROM events WHERE type = 'TaskCompleted'")}  # fmt: skip
        assert workers and {w.split(":")[0] for w in workers} <= {"worker-a", "worker-b"}, workers
        (tmp_path / "run.out").write_text(output + json.dumps(sorted(workers)))


def _printed(output: str) -> list[str]:
    """The run's report lines (progress lines and timings left out)."""
    return [line for line in output.splitlines() if line.startswith(("hosts/", "budget", "best so far"))]
