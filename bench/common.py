"""Shared set-up for benchmarks: a scratch database on the local Postgres, paired rounds,
the machine's load, and how a ratio is reported.

Benchmarks print ratios against a baseline measured in the same run, because absolute
times drift on shared machines: every side runs once per round, the sides' order rotates
from round to round, and a ratio is taken within each round. The median round's ratio is
the figure; the lowest and highest show the spread, and the load average over the run
says how idle the machine was. BENCH_ADMIN_URL names the server (loopback by default).
"""

from __future__ import annotations

import os
import statistics
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

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


def paired_rounds(sides: Mapping[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Each side's measurement in every round; within a round the sides run back to back,
    and their order rotates from round to round, so no side always runs first (on a warm
    or a cold machine) and a drift in the machine's speed hits every side alike."""
    names = list(sides)
    found: dict[str, list[float]] = {name: [] for name in names}
    for i in range(rounds):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:
            found[name].append(sides[name]())
    return found


def ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """Round by round: a ratio is only taken between measurements of the same round."""
    return [n / d for n, d in zip(numerators, denominators, strict=True)]


def spread(values: Sequence[float], digits: int = 2) -> str:
    """`median (lowest-highest)`."""
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def verdict(values: Sequence[float], target: float, at_least: bool = True) -> str:
    """`met` or `not met`, judged on the median round."""
    median = statistics.median(values)
    return "met" if (median >= target if at_least else median <= target) else "not met"


def report_ratio(label: str, values: Sequence[float], target: float, at_least: bool = True,
                 unit: str = "", width: int = 44, digits: int = 2) -> bool:
    """One line: the median ratio with its spread, the target, and whether it is met."""
    sign = ">=" if at_least else "<="
    met = verdict(values, target, at_least)
    print(f"{label:{width}s} {spread(values, digits)}{unit}   target {sign} {target:g}{unit}: {met}")
    return met == "met"


@dataclass
class LoadWatch:
    """The machine's 1-minute load average, sampled every `every` seconds while a
    benchmark runs (os.getloadavg: runnable processes, ours included)."""

    every: float = 2.0
    samples: list[float] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> LoadWatch:
        self.samples.append(os.getloadavg()[0])

        def sample() -> None:
            while not self._stop.wait(self.every):
                self.samples.append(os.getloadavg()[0])

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.samples.append(os.getloadavg()[0])

    def line(self) -> str:
        return (f"load average (1 min): {self.samples[0]:.2f} at the start, {spread(self.samples)} during the"
                f" run (ours included) on {os.cpu_count()} cores")
