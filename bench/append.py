"""Append throughput of the event store against raw psycopg writes of the same rows, one run.

    .venv/bin/python bench/append.py [--events 40000] [--rounds 7]

Every round measures each side once, back to back, in an order that rotates from round
to round (bench/common.py); ratios are taken within a round, and the median round is the
figure, with the lowest and highest beside it and the machine's load over the run.

The store's side validates, encodes and hashes every event and keeps the concurrency
check on. The raw sides send prepared rows, the very rows the store would write (time-
ordered event ids, a canonical payload, hashes, keys where the store's side has keys):

  raw COPY, bare table         COPY of batches of 100, one commit each: the ceiling
  raw executemany, bare table  psycopg executemany of batches of 100 into a copy of
                               `events` with no index, constraint or trigger
  raw executemany, our indexes the same into `LIKE events INCLUDING ALL`: our primary
                               key and unique indexes (the key's included), our checks

Targets (one writer, batches of 100):
  keyed append / raw executemany of the keyed rows into our indexes    >= 1.0
  unkeyed append / raw executemany into the bare table                 >= 0.9
  four writers on four branches / one writer (keyed)                   >= 1.3, and no
    writer ever waits on a lock another branch's append holds (pg_locks sampled every
    20 ms during an extra, untimed run of four writers: the sampler's own queries would
    slow the timed runs it watches)
Raw executemany by four writers against one (into our indexes, same run) is printed for
scale: what Postgres itself gains from more writers on this machine, where one writer
already keeps both cores partly busy.
The fleet's real shape, single events each with a key and a commit of its own, is
measured against single-row INSERTs of the same rows into our indexes (no target).
"""

from __future__ import annotations

import argparse
import multiprocessing
import multiprocessing.queues
import multiprocessing.synchronize
import os
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import orjson
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import LoadWatch, paired_rounds, ratios, report_ratio, scratch_database, spread  # noqa: E402
from evotrainer.refs import BranchRef  # noqa: E402
from evotrainer.store import EventStore, NewEvent  # noqa: E402
from evotrainer.store.batch import new_event_ids  # noqa: E402

BATCH = 100


def payload(i: int) -> dict[str, Any]:
    """A TaskRequested payload of about 300 bytes."""
    return {
        "task_id": f"task-{i:08d}",
        "kind": "rollout",
        "queue": "rollout",
        "max_attempts": 3,
        "inputs": {
            "policy": "3f" * 32,
            "harness": "a1" * 32,
            "group_size": 8,
            "temperature": 1.0,
            "prompts": [f"p{i % 97}", f"p{(i + 1) % 97}"],
        },
    }


def keys_for(run: str, count: int) -> list[str]:
    """Keys shaped like the fleet's (a task id, then what the event is), new in every run."""
    return [f"{uuid.UUID(int=i + (int(run, 16) << 64))}:requested" for i in range(count)]


def new_events(count: int, keys: list[str] | None) -> list[NewEvent]:
    return [NewEvent("TaskRequested", payload(i), idempotency_key=keys[i] if keys else None) for i in range(count)]


# -- the store's side -------------------------------------------------------------


def store_writer(url: str, branch: str, events: list[NewEvent], batch: int = BATCH,
                 expected: bool = True) -> float:
    """Events/s of appending `events` to a branch, `batch` at a time (the clock covers the
    appends only; the store is connected and the branch resolved beforehand)."""
    with EventStore.connect(url, actor="bench") as store:
        ref = BranchRef("bench", branch)
        seq, _ = store.head(ref)
        start = time.perf_counter()
        for i in range(0, len(events), batch):
            store.append(ref, events[i : i + batch], expected_seq=seq if expected else None)
            seq += len(events[i : i + batch])
        return len(events) / (time.perf_counter() - start)


# -- the raw sides ----------------------------------------------------------------

COLUMNS = ("event_id, branch_id, seq, type, schema_version, payload, causation_id, correlation_id,"
           " idempotency_key, actor, recorded_at, prev_hash, hash")
INSERT = f"INSERT INTO {{table}} ({COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s, %s, %s)"
# A copy of the events table without a single index, constraint or trigger (LIKE copies
# only the columns' NOT NULLs unless told to include more; defaults and the identity
# are kept, so the server fills position and transaction_id as it does for events).
BARE_TABLE = "CREATE TABLE raw_bare (LIKE events INCLUDING DEFAULTS INCLUDING IDENTITY)"
# Our primary key, unique indexes (the idempotency key's partial one included), checks.
INDEXED_TABLE = "CREATE TABLE raw_indexed (LIKE events INCLUDING ALL)"


def raw_rows(events: list[NewEvent], branch_id: int) -> list[tuple[Any, ...]]:
    """The rows the store would write for `events` on a branch (hashes stand in, as text
    of the same length: the raw sides need not chain them)."""
    now = datetime.now(UTC)
    return [
        (event_id, branch_id, seq, e.type, 1, orjson.dumps(e.payload).decode(), None, None, e.idempotency_key,
         "bench", now, "0" * 64, f"{seq:064x}")
        for seq, (e, event_id) in enumerate(zip(events, new_event_ids(len(events)), strict=True), start=1)
    ]


def raw_executemany(url: str, table: str, rows: list[tuple[Any, ...]], batch: int = BATCH) -> float:
    """Events/s of psycopg executemany (pipelined by psycopg), one commit per batch."""
    with psycopg.connect(url) as conn, conn.cursor() as cur:
        start = time.perf_counter()
        for i in range(0, len(rows), batch):
            cur.executemany(INSERT.format(table=table), rows[i : i + batch])
            conn.commit()
        return len(rows) / (time.perf_counter() - start)


def raw_single(url: str, table: str, rows: list[tuple[Any, ...]]) -> float:
    """Events/s of one INSERT per row, each its own transaction (autocommit)."""
    with psycopg.connect(url, autocommit=True) as conn:
        statement = INSERT.format(table=table)
        start = time.perf_counter()
        for row in rows:
            conn.execute(statement, row)
        return len(rows) / (time.perf_counter() - start)


def raw_copy(url: str, table: str, rows: list[tuple[Any, ...]], batch: int = BATCH) -> float:
    """Events/s of COPY FROM STDIN in binary-free text form, one COPY and commit per batch."""
    with psycopg.connect(url) as conn, conn.cursor() as cur:
        start = time.perf_counter()
        for i in range(0, len(rows), batch):
            with cur.copy(f"COPY {table} ({COLUMNS}) FROM STDIN") as copy:
                for row in rows[i : i + batch]:
                    copy.write_row(row)
            conn.commit()
        return len(rows) / (time.perf_counter() - start)


# -- four writers -----------------------------------------------------------------


def machine_busy() -> tuple[int, int]:
    """Busy and total CPU time of the whole machine so far, in clock ticks (/proc/stat).
    Time stolen by the hypervisor is neither (it was never ours), and guest time is
    already inside user time."""
    user, nice, system, idle, iowait, irq, softirq = (
        int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8])
    busy = user + nice + system + irq + softirq
    return busy, busy + idle + iowait


def busy_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    """The share of the machine's CPU time that was busy between two machine_busy()."""
    return (after[0] - before[0]) / max(1, after[1] - before[1])


class WriterDone(NamedTuple):
    """What a writer process reports when its appends are done."""

    at: float
    """time.monotonic() when its last append returned."""
    machine: tuple[int, int]
    """machine_busy() at that moment."""


class RawTarget(NamedTuple):
    """Where a raw writer sends its rows: raw executemany into `table`, as branch `branch_id`."""

    table: str
    branch_id: int


def _writer_process(url: str, target: str | RawTarget, count: int, ready: multiprocessing.synchronize.Semaphore,
                    start: multiprocessing.synchronize.Event,
                    reports: multiprocessing.queues.Queue) -> None:  # type: ignore[type-arg]
    """One writer: the store appending keyed events to branch `target`, or raw executemany
    of the same kind of rows into a RawTarget."""
    if isinstance(target, RawTarget):
        rows = raw_rows(new_events(count, keys_for(uuid.uuid4().hex[:16], count)), target.branch_id)
        ready.release()
        start.wait()
        raw_executemany(url, target.table, rows)
    else:
        # Warm up like the one writer, whose process has appended before: compiled
        # validators and imports are per process.
        store_writer(url, target, new_events(2 * BATCH, keys_for(uuid.uuid4().hex[:16], 2 * BATCH)))
        events = new_events(count, keys_for(uuid.uuid4().hex[:16], count))
        ready.release()
        start.wait()
        store_writer(url, target, events)
    # The clock stops when the last writer's appends are done, not when its process has
    # exited (tens of milliseconds the one writer's time has no such thing in).
    # time.monotonic() is the system-wide CLOCK_MONOTONIC on Linux, the same in every process.
    reports.put(WriterDone(time.monotonic(), machine_busy()))


class ParallelRun(NamedTuple):
    rate: float
    """Events/s, all writers together."""
    busy: float
    """The share of the machine's CPU time that was busy while they wrote."""
    lock_samples: int
    waits: dict[str, int]
    """With `watch_locks`: the locks writers waited on, by type/mode, in `lock_samples`
    samples of pg_locks."""


def parallel(url: str, targets: list[str] | list[RawTarget], per_writer: int, watch_locks: bool = False) -> ParallelRun:
    """One writer process per target (a branch for the store's keyed appends, or a
    RawTarget), every one started and warmed up before the clock."""
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Semaphore(0)
    start = ctx.Event()
    reports = ctx.Queue()
    procs = [ctx.Process(target=_writer_process, args=(url, t, per_writer, ready, start, reports)) for t in targets]
    for proc in procs:
        proc.start()
    for _ in procs:
        if not ready.acquire(timeout=300):
            for proc in procs:
                proc.kill()
            raise SystemExit("a writer process did not get ready within 5 minutes (see its error above)")
    samples = 0
    waits: dict[str, int] = {}
    stop = threading.Event()

    def sample_locks() -> None:
        nonlocal samples
        with psycopg.connect(url, autocommit=True) as conn:
            while not stop.is_set():
                samples += 1
                for locktype, mode in conn.execute(
                    "SELECT l.locktype, l.mode FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
                    " WHERE NOT l.granted AND a.datname = current_database()"
                ):
                    waits[f"{locktype}/{mode}"] = waits.get(f"{locktype}/{mode}", 0) + 1
                time.sleep(0.02)  # the sampler's own queries must not crowd out the writers

    sampler = threading.Thread(target=sample_locks) if watch_locks else None
    if sampler:
        sampler.start()
    began, machine_before = time.monotonic(), machine_busy()
    start.set()
    done = [reports.get() for _ in procs]
    for proc in procs:
        proc.join()
    stop.set()
    if sampler:
        sampler.join()
    last = max(done, key=lambda d: d.at)
    return ParallelRun(len(targets) * per_writer / (last.at - began), busy_share(machine_before, last.machine),
                       samples, waits)


# -- the run ----------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=40000,
                        help="events per batched run (one of 10,000 lasts a fifth of a second: too short to time)")
    parser.add_argument("--singles", type=int, default=1000, help="events per run of single keyed events")
    parser.add_argument("--rounds", type=int, default=7, help="paired rounds; the median round counts")
    args = parser.parse_args()
    n, singles = args.events, args.singles
    with scratch_database() as url, LoadWatch() as load:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(BARE_TABLE)
            conn.execute(INDEXED_TABLE)
        with EventStore.connect(url) as store:
            store.create_experiment("bench")
            for name in ["keyed", "unkeyed", "single", "warm"] + [f"w{j}" for j in range(4 * (args.rounds + 1))]:
                store.fork(BranchRef("bench", "main"), name)
        raw_branch = iter(range(10**6, 10**7))  # raw rows need a fresh (branch, seq) range per run
        busy: dict[str, list[float]] = {"one": [], "four": [], "raw one": [], "raw four": []}
        writers = iter(range(4 * (args.rounds + 1)))

        def keyed_rows(count: int) -> list[tuple[Any, ...]]:
            return raw_rows(new_events(count, keys_for(uuid.uuid4().hex[:16], count)), next(raw_branch))

        def unkeyed_rows(count: int) -> list[tuple[Any, ...]]:
            return raw_rows(new_events(count, None), next(raw_branch))

        def timed(prepare: Callable[[], Any], run: Callable[[Any], float]) -> Callable[[], float]:
            """A side whose inputs are made before its clock starts."""
            return lambda: run(prepare())

        def busy_while(share: str, rate: Callable[[], float]) -> float:
            """`rate()`, noting how busy the machine was while it ran."""
            before = machine_busy()
            found = rate()
            busy[share].append(busy_share(before, machine_busy()))
            return found

        def four_writers(share: str, targets: Callable[[], list[str] | list[RawTarget]]) -> Callable[[], float]:
            def run() -> float:
                done = parallel(url, targets(), n // 2)
                busy[share].append(done.busy)
                return done.rate

            return run

        sides: dict[str, Callable[[], float]] = {
            "raw COPY, bare table": timed(lambda: unkeyed_rows(n), lambda r: raw_copy(url, "raw_bare", r)),
            "raw executemany, bare table": timed(lambda: unkeyed_rows(n),
                                                 lambda r: raw_executemany(url, "raw_bare", r)),
            "raw executemany keyed, our indexes": timed(
                lambda: keyed_rows(n), lambda r: busy_while("raw one", lambda: raw_executemany(url, "raw_indexed", r))),
            "raw executemany keyed, our indexes, four writers": four_writers(
                "raw four", lambda: [RawTarget("raw_indexed", next(raw_branch)) for _ in range(4)]),
            "evotrainer append, unkeyed": timed(lambda: new_events(n, None),
                                                lambda e: store_writer(url, "unkeyed", e)),
            "evotrainer append, keyed": timed(lambda: new_events(n, keys_for(uuid.uuid4().hex[:16], n)),
                                              lambda e: busy_while("one", lambda: store_writer(url, "keyed", e))),
            "evotrainer append, keyed, four writers": four_writers(
                "four", lambda: [f"w{next(writers)}" for _ in range(4)]),
            "raw single INSERTs keyed, our indexes": timed(lambda: keyed_rows(singles),
                                                           lambda r: raw_single(url, "raw_indexed", r)),
            "evotrainer append, single keyed events": timed(
                lambda: new_events(singles, keys_for(uuid.uuid4().hex[:16], singles)),
                lambda e: store_writer(url, "single", e, batch=1, expected=False)),
        }
        # Warm caches, compiled validators and the server's plans on every side.
        store_writer(url, "warm", new_events(2000, keys_for(uuid.uuid4().hex[:16], 2000)))
        raw_executemany(url, "raw_indexed", keyed_rows(2000))
        found = paired_rounds(sides, args.rounds)
        watched = parallel(url, [f"w{next(writers)}" for _ in range(4)], n // 2, watch_locks=True)

    print(f"{args.rounds} paired rounds, sides in rotating order; {n} events per batched run (batches of {BATCH}),"
          f" {singles} per run of single events")
    print("events/s, median (lowest-highest):")
    for name, rates in found.items():
        print(f"  {name:44s} {spread(rates, 0)}")
    keyed, unkeyed = found["evotrainer append, keyed"], found["evotrainer append, unkeyed"]
    print("ratios, round by round, median (lowest-highest):")
    raw_indexed, raw_bare = found["raw executemany keyed, our indexes"], found["raw executemany, bare table"]
    report_ratio("  keyed / raw executemany keyed, our indexes", ratios(keyed, raw_indexed), 1.0)
    report_ratio("  unkeyed / raw executemany, bare table", ratios(unkeyed, raw_bare), 0.9)
    report_ratio("  four writers / one writer (keyed)", ratios(found["evotrainer append, keyed, four writers"], keyed),
                 1.3)
    # Relation extension ("extend") is Postgres growing the table's file, a latch-like
    # lock held for microseconds by whichever insert needs a new page; every other lock
    # type is one an append could hold against another (advisory, transactionid, tuple...).
    between = {key: count for key, count in watched.waits.items() if not key.startswith("extend/")}
    print(f"  waits on a lock another branch's append holds: {sum(between.values())} in {watched.lock_samples}"
          f" samples of pg_locks {between or ''}: {'met' if not between else 'not met'} (target 0);"
          f" on relation extension: {sum(watched.waits.values()) - sum(between.values())}")
    single = ratios(found["evotrainer append, single keyed events"], found["raw single INSERTs keyed, our indexes"])
    print(f"  single keyed events / raw single INSERTs   {spread(single)}"
          "   (no target: the fleet's shape, one commit per event)")
    print("  for scale (no target):")
    copy = found["raw COPY, bare table"]
    print(f"    raw executemany, our indexes / bare      {spread(ratios(raw_indexed, raw_bare))}")
    print(f"    keyed / raw COPY (the ceiling)           {spread(ratios(keyed, copy))}")
    print(f"    unkeyed / raw COPY                       {spread(ratios(unkeyed, copy))}")
    # One writer overlaps its own work with its server backend's (pipelined chunks), so
    # it already keeps much of the machine busy; four writers can only add what is left.
    # Raw executemany's four writers / one, same run, is what Postgres itself scales to here.
    raw_four = ratios(found["raw executemany keyed, our indexes, four writers"], raw_indexed)
    print(f"    raw executemany, four writers / one      {spread(raw_four)}   (what the server itself scales to here)")
    share = {name: statistics.median(values) for name, values in busy.items()}
    for who, one, four in (("one writer", "one", "four"), ("raw executemany", "raw one", "raw four")):
        print(f"  the machine's {os.cpu_count()} cores were {share[one]:.0%} busy with {who} and {share[four]:.0%}"
              f" with four: at one's cost per event, four can reach at most {1 / max(share[one], 1e-9):.2f}x one")
    print(load.line())


if __name__ == "__main__":
    main()
