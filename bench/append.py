"""Append throughput of the event store against raw psycopg INSERTs, measured in one run.

    .venv/bin/python bench/append.py [--events 20000]

(a) one writer, batches of 100, with validation, canonical encoding, hashing and the
    concurrency check on, against executemany INSERTs of the same rows into a bare
    table (no constraints, no triggers): target >= 0.8 of raw. Ratios are the median of
    several rounds, each measuring both sides back to back.
(b) four writer processes on four branches against one writer: target >= 1.2x, with no
    writer ever waiting on a lock held by another branch's append (pg_locks sampled every
    20 ms during an extra, untimed run of four writers: the sampler's own queries would
    slow the timed runs it watches). Both clocks cover the same work: from the start of
    the writers' appends (connecting included) to the return of the last one.
"""

from __future__ import annotations

import argparse
import multiprocessing
import multiprocessing.queues
import os
import sys
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import best_rate, scratch_database  # noqa: E402
from evotrainer.refs import BranchRef  # noqa: E402
from evotrainer.store import EventStore, NewEvent  # noqa: E402

BATCH = 100


def payload(i: int) -> dict:
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


def batches(count: int) -> list[list[NewEvent]]:
    events = [NewEvent("TaskRequested", payload(i)) for i in range(count)]
    return [events[i : i + BATCH] for i in range(0, count, BATCH)]


def evotrainer_writer(url: str, branch: str, count: int, cpu: list[float] | None = None) -> int:
    """Append `count` events in batches; adds this process's and its server backend's CPU
    seconds to `cpu` when given."""
    with EventStore.connect(url, actor="bench") as store:
        ref = BranchRef("bench", branch)
        seq, _ = store.head(ref)
        backend = store.conn.info.backend_pid
        before = time.process_time() + backend_cpu_s(backend)
        for batch in batches(count):
            store.append(ref, batch, expected_seq=seq)
            seq += len(batch)
        if cpu is not None:
            cpu.append(time.process_time() + backend_cpu_s(backend) - before)
    return count


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


def backend_cpu_s(pid: int) -> float:
    """CPU seconds used so far by a process on this machine (the server runs here)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


RAW_TABLE = """
CREATE TABLE IF NOT EXISTS raw_events (
    position bigserial, event_id uuid, branch_id bigint, seq bigint, type text, schema_version int,
    payload jsonb, causation_id uuid, correlation_id uuid, idempotency_key text, actor text,
    recorded_at timestamptz, prev_hash text, hash text)
"""


def raw_writer(url: str, count: int) -> int:
    import orjson

    rows = [
        (str(uuid.uuid4()), 1, i + 1, "TaskRequested", 1, orjson.dumps(payload(i)).decode(), None, None, None,
         "bench", datetime.now(UTC), "0" * 64, "f" * 64)
        for i in range(count)
    ]
    with psycopg.connect(url) as conn:
        conn.execute(RAW_TABLE)
        conn.commit()
        with conn.cursor() as cur:
            for i in range(0, count, BATCH):
                cur.executemany(
                    "INSERT INTO raw_events (event_id, branch_id, seq, type, schema_version, payload, causation_id,"
                    " correlation_id, idempotency_key, actor, recorded_at, prev_hash, hash)"
                    " VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s, %s, %s)",
                    rows[i : i + BATCH],
                )
                conn.commit()
    return count


def _writer_process(url: str, branch: str, count: int, ready: multiprocessing.synchronize.Semaphore,
                    start: multiprocessing.synchronize.Event,
                    reports: multiprocessing.queues.Queue) -> None:  # type: ignore[type-arg]
    spent: list[float] = []
    # Warm up like the one writer, which runs in the main process after its warm-up
    # append: compiled validators and imports are per process.
    evotrainer_writer(url, branch, 2 * BATCH)
    ready.release()
    start.wait()
    evotrainer_writer(url, branch, count, spent)
    # The clock stops when the last writer's appends are done, not when its process has
    # exited: a Python process takes tens of milliseconds to tear down, and the one
    # writer's time has no such thing in it. time.monotonic() is the system-wide
    # CLOCK_MONOTONIC on Linux, the same clock in every process.
    reports.put(WriterDone(spent[0], time.monotonic(), machine_busy()))


class WriterDone(NamedTuple):
    """What a writer process reports when its appends are done."""

    cpu_s: float
    """CPU seconds of the writer and its server backend."""
    at: float
    """time.monotonic() when its last append returned."""
    machine: tuple[int, int]
    """machine_busy() at that moment."""


class ParallelRun(NamedTuple):
    rate: float
    """Events/s, all writers together."""
    cpu_per_event: float
    """CPU seconds per event of the writers and their server backends."""
    busy: float
    """The share of the machine's CPU time that was busy while they wrote."""
    lock_samples: int
    waits: dict[str, int]
    """With `watch_locks`: the locks writers waited on, by type/mode, in `lock_samples`
    samples of pg_locks."""


def parallel(url: str, branches: list[str], per_writer: int, watch_locks: bool = False) -> ParallelRun:
    """One writer process per branch, every one started and warmed up before the clock."""
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Semaphore(0)
    start = ctx.Event()
    reports = ctx.Queue()
    procs = [ctx.Process(target=_writer_process, args=(url, b, per_writer, ready, start, reports)) for b in branches]
    for proc in procs:
        proc.start()
    for _ in procs:  # every process imported, connected and warmed up before the clock starts
        if not ready.acquire(timeout=300):
            for proc in procs:
                proc.kill()
            raise SystemExit("a writer process did not get ready within 5 minutes (see its error above)")
    samples = 0
    waits: dict[str, int] = {}
    stop = threading.Event()

    def sample_locks() -> None:
        nonlocal samples, waits
        with psycopg.connect(url, autocommit=True) as conn:
            while not stop.is_set():
                samples += 1
                for locktype, mode in conn.execute(
                    "SELECT l.locktype, l.mode FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
                    " WHERE NOT l.granted AND a.datname = current_database()"
                ):
                    key = f"{locktype}/{mode}"
                    waits[key] = waits.get(key, 0) + 1
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
    events = len(branches) * per_writer
    return ParallelRun(events / (last.at - began), sum(d.cpu_s for d in done) / events,
                       busy_share(machine_before, last.machine), samples, waits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20000, help="events per measured run")
    parser.add_argument("--repeats", type=int, default=5, help="rounds of raw, one writer and four writers")
    args = parser.parse_args()
    with scratch_database() as url:
        with EventStore.connect(url) as store:
            store.create_experiment("bench")
            for name in ["warm"] + [f"p{i}w{j}" for i in range(args.repeats + 1) for j in range(4)]:
                store.fork(BranchRef("bench", "main"), name)
        evotrainer_writer(url, "warm", 2000)  # warm caches and compiled validators
        raw_writer(url, 2000)
        # Each round runs raw, one writer and four writers back to back, and the ratios
        # are taken within a round: this machine's speed drifts by tens of percent from
        # one minute to the next, and a round is short enough to see one speed. The
        # median round is reported (not the best of each side, which rewards whichever
        # side happened to meet a quiet moment).
        rounds: list[tuple[float, float, float]] = []
        cpu_one: list[float] = []
        cpu_four: list[float] = []
        busy_one: list[float] = []
        busy_four: list[float] = []
        for i in range(args.repeats):
            raw = best_rate(lambda: raw_writer(url, args.events), repeats=1)
            before = machine_busy()
            one = best_rate(lambda: evotrainer_writer(url, "main", args.events, cpu_one), repeats=1)
            busy_one.append(busy_share(before, machine_busy()))
            four = parallel(url, [f"p{i}w{j}" for j in range(4)], args.events // 2)
            busy_four.append(four.busy)
            rounds.append((raw, one, four.rate))
            cpu_four.append(four.cpu_per_event)
        watched = parallel(url, [f"p{args.repeats}w{j}" for j in range(4)], args.events // 2, watch_locks=True)
        samples, waits = watched.lock_samples, watched.waits
    ratio_a = sorted(one / raw for raw, one, _ in rounds)
    ratio_b = sorted(four / one for _, one, four in rounds)
    mid = len(rounds) // 2
    print(f"{len(rounds)} rounds of {args.events} events each; events/s, median (lowest-highest):")
    for label, index in (("raw executemany (batches of 100)", 0), ("evotrainer append, one writer", 1),
                         ("evotrainer append, four writers", 2)):
        rates = sorted(r[index] for r in rounds)
        print(f"  {label:34s} {rates[mid]:8.0f}  ({rates[0]:.0f}-{rates[-1]:.0f})")
    print(f"(a) one writer / raw            = {ratio_a[mid]:.2f}   ({ratio_a[0]:.2f}-{ratio_a[-1]:.2f})"
          "   (target >= 0.80)")
    print(f"(b) four writers / one writer   = {ratio_b[mid]:.2f}   ({ratio_b[0]:.2f}-{ratio_b[-1]:.2f})"
          "   (target >= 1.20)")
    # Relation extension ("extend") is Postgres growing the table's file, a latch-like
    # lock held for microseconds by whichever insert needs a new page; every other lock
    # type is one an append could hold against another (advisory, transactionid, tuple...).
    between = {key: count for key, count in waits.items() if not key.startswith("extend/")}
    print(f"    waits on a lock another append holds: {sum(between.values())} in {samples} samples of pg_locks"
          f" {between or ''} (target 0); on relation extension: {sum(waits.values()) - sum(between.values())}")
    # One writer overlaps its own work with its server backend's (pipelined chunks), so
    # it already keeps most of the machine busy; four writers can only add what is left.
    per_event_one = sorted(cpu_one)[mid] / args.events
    per_event_four = sorted(cpu_four)[mid]
    share_one, share_four = sorted(busy_one)[mid], sorted(busy_four)[mid]
    print(f"    CPU per event (writer + server): one writer {per_event_one * 1e6:.1f} us,"
          f" four writers {per_event_four * 1e6:.1f} us")
    print(f"    the machine's {os.cpu_count()} cores were {share_one:.0%} busy with one writer and"
          f" {share_four:.0%} with four: at one writer's cost per event, four can reach at most"
          f" {1 / share_one:.2f}x one")


if __name__ == "__main__":
    main()
