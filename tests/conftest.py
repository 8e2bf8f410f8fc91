"""Shared fixtures: fresh databases on the real Postgres, migrated by the real Alembic.

Tests that need Postgres fail (never skip) when it is unreachable and CI=true. A template
database is migrated once per run; each test that needs isolation gets a copy of it
(CREATE DATABASE ... TEMPLATE is a file copy, far cheaper than migrating again).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from evotrainer.store import EventStore, migrate

ADMIN_URL = os.environ.get("EVOTRAINER_TEST_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


_TINY_CACHE = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    """One warm-start cache for the run (evotrainer/training/warm_start_cache.py): the tiny
    policy's warm start is deterministic work, built by the first test that needs it and
    copied into the artifact store of every later one (each test keeps a store of its own).
    Set here, before any test copies the environment for the processes it starts."""
    if not os.environ.get("EVOTRAINER_TINY_CACHE"):
        cache = tempfile.mkdtemp(prefix="evotrainer-tiny-cache-")
        config.stash[_TINY_CACHE] = cache
        os.environ["EVOTRAINER_TINY_CACHE"] = cache


def pytest_unconfigure(config: pytest.Config) -> None:
    cache = config.stash.get(_TINY_CACHE, None)
    if cache is not None:
        os.environ.pop("EVOTRAINER_TINY_CACHE", None)
        shutil.rmtree(cache, ignore_errors=True)


def url_for(database: str) -> str:
    base, _, _ = ADMIN_URL.rpartition("/")
    return f"{base}/{database}"


def _admin() -> psycopg.Connection:
    try:
        return psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        message = f"Postgres is not reachable at {ADMIN_URL}: {exc}"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


def create_database(template: str | None = None) -> str:
    name = f"evotest_{uuid.uuid4().hex[:12]}"
    with _admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    return name


def drop_database(name: str) -> None:
    with _admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def template_database() -> Iterator[str]:
    name = create_database()
    migrate.upgrade(url_for(name))
    yield name
    drop_database(name)


@pytest.fixture
def database_url(template_database: str) -> Iterator[str]:
    """A fresh, migrated database for one test, dropped afterwards."""
    name = create_database(template_database)
    yield url_for(name)
    drop_database(name)


@pytest.fixture
def store(database_url: str) -> Iterator[EventStore]:
    with EventStore.connect(database_url, actor="test") as opened:
        yield opened


@pytest.fixture
def cli_env(database_url: str, tmp_path) -> dict[str, str]:
    """Environment for running the real `evotrainer` CLI against the test database."""
    env = dict(os.environ)
    env["EVOTRAINER_DATABASE_URL"] = database_url
    env["EVOTRAINER_HOME"] = str(tmp_path / "home")
    env["EVOTRAINER_ACTOR"] = "cli-test"
    return env
