"""Shared set-up for benchmarks: a scratch database on the local Postgres, and timing.

Benchmarks print ratios against a baseline measured in the same run, because absolute
times drift on shared machines. BENCH_ADMIN_URL names the server (loopback by default).
"""

from __future__ import annotations

import os
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg

ADMIN_URL = os.environ.get("BENCH_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


@contextmanager
def scratch_database(migrated: bool = True) -> Iterator[str]:
    """A fresh database (migrated to head unless told otherwise), dropped afterwards."""
    from evotrainer.store import migrate

    name = f"evobench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = database_url(ADMIN_URL, name)
    try:
        if migrated:
            migrate.upgrade(url)
        yield url
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def database_url(server_url: str, name: str) -> str:
    """`server_url` naming database `name` instead, its query (e.g. ?host=/socket/dir) kept."""
    parts = urllib.parse.urlsplit(server_url)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))


def best_rate(fn: Callable[[], int], repeats: int = 3) -> float:
    """Items per second of the best of `repeats` runs (the least disturbed one)."""
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        items = fn()
        best = max(best, items / (time.perf_counter() - start))
    return best
