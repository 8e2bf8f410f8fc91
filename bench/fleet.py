"""Fleet overhead against bare Celery, measured in the same run on the same Redis broker.

    python bench/fleet.py [--tasks 2000] [--latency-samples 200] [--durable]

Two worker processes (threads pool, one task at a time each, the fleet's long-job
settings) run no-op tasks. The fleet's path is the whole of it. The throughput runs
request their tasks in one transaction (request_tasks) and the dispatcher hands them
off; each latency sample is one request_task, whose process publishes the task itself
after its commit (evotrainer.fleet.handoff), as any requester configured with the broker
does. Then the worker's lease, loading the request, appending TaskCompleted. The
baseline is a bare Celery no-op task published straight to the broker with the same
settings. Both tasks push their start time to one Redis list, so "task start" means the
same thing on both sides. Prints throughput (tasks/s, until the last task completed),
latency from append (or publish) to task start (p50, p99) and the ratios, the spread of
the rounds and the machine's load. Targets: a throughput overhead of at most 2x (the
median round), and a p99 latency at most 3x bare (all rounds' samples pooled: a round's
few dozen samples have no p99 of their own).

The workers run with their defaults, so a no-op task (far shorter than
EVOTRAINER_DURABLE_CLOSE_SECONDS) records its outcome without waiting for the disk;
--durable makes every outcome wait, as a task longer than that does.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from celery import Celery  # noqa: E402

from evotrainer.fleet.registry import TaskRequest, TaskResult, register_kind  # noqa: E402

BROKER = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
MARKS = os.environ.get("BENCH_MARKS_KEY", "evotrainer-bench-marks")


def _mark(sent_at: float) -> None:
    _redis().rpush(MARKS, f"{sent_at!r} {time.time()!r}")


_client = None


def _redis():  # type: ignore[no-untyped-def]
    global _client
    if _client is None:
        import redis

        _client = redis.Redis.from_url(os.environ.get("BENCH_REDIS_URL", BROKER))
    return _client


@register_kind("bench.mark", queue="control")
def fleet_mark(request: TaskRequest) -> TaskResult:
    """The fleet's no-op: note when it started."""
    _mark(float(request.task.inputs["sent_at"]))
    return TaskResult()


def make_bare_app() -> Celery:
    """Bare Celery with the fleet's long-job settings, on the same broker and prefix."""
    prefix = os.environ.get("BENCH_PREFIX", "bench-")
    app = Celery("bare", broker=os.environ.get("BENCH_REDIS_URL", BROKER))
    app.conf.update(task_acks_late=True, task_reject_on_worker_lost=True, worker_prefetch_multiplier=1,
                    task_ignore_result=True, task_default_queue=f"{prefix}bare",
                    broker_transport_options={"visibility_timeout": 86400}, worker_hijack_root_logger=False,
                    worker_enable_remote_control=False, worker_send_task_events=False)

    @app.task(name="bench.bare", acks_late=True, ignore_result=True)
    def bare(sent_at: float) -> None:
        _mark(sent_at)

    return app


bare_app = make_bare_app()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Bench:
    def __init__(self, database_url: str, prefix: str, logs: Path) -> None:
        self.database_url = database_url
        self.prefix = prefix
        self.logs = logs
        self.env = dict(os.environ, EVOTRAINER_DATABASE_URL=database_url, EVOTRAINER_BROKER_URL=BROKER,
                        EVOTRAINER_QUEUE_PREFIX=prefix, EVOTRAINER_TASK_MODULES="bench.fleet",
                        BENCH_PREFIX=prefix, BENCH_MARKS_KEY=MARKS, BENCH_REDIS_URL=BROKER,
                        EVOTRAINER_DISPATCH_POLL_SECONDS="0.2", PYTHONPATH=str(ROOT))
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, argv: list[str]) -> None:
        log = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115
        self.procs.append(subprocess.Popen(argv, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT))

    def stop_all(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.procs = []

    def marks(self) -> list[tuple[float, float]]:
        return [tuple(map(float, raw.split())) for raw in _redis().lrange(MARKS, 0, -1)]  # type: ignore[misc]

    def wait_marks(self, count: int, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while _redis().llen(MARKS) < count:
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out waiting for {count} tasks; logs in {self.logs}")
            time.sleep(0.005)


class FleetSide:
    """The fleet: a dispatcher and two `evotrainer worker` processes."""

    name = "evotrainer"

    def __init__(self, bench: Bench, branches: int) -> None:
        from evotrainer.refs import BranchRef
        from evotrainer.store import EventStore

        # This process requests the latency run's tasks configured like the fleet, so it
        # hands each one to the broker itself (evotrainer.fleet.handoff), as any requester
        # with a broker does.
        os.environ.update(EVOTRAINER_BROKER_URL=BROKER, EVOTRAINER_QUEUE_PREFIX=bench.prefix)
        python = sys.executable
        bench.start("dispatcher", [python, "-m", "evotrainer", "dispatcher", "--loglevel", "warning"])
        for i in range(2):
            bench.start(f"worker{i}", [python, "-m", "evotrainer", "worker", "--queues", "control",
                                       "--loglevel", "warning"])
        self.bench = bench
        self.store = EventStore.connect(bench.database_url, actor="bench")
        self.ref = BranchRef("bench", "main")
        self.store.create_experiment("bench")
        self.refs = [self.ref] + [BranchRef("bench", f"b{i}") for i in range(1, branches)]
        for extra in self.refs[1:]:
            self.store.fork(self.ref, extra.branch)
        self.count = 0

    def one(self) -> None:
        from evotrainer.fleet.registry import request_task

        self.count += 1
        request_task(self.store, self.ref, "bench.mark", task_id=f"one{self.count}", inputs={"sent_at": time.time()})

    def many(self, tasks: int) -> None:
        """Request `tasks` tasks in one transaction a branch (request_tasks, the fleet's bulk
        request: the dispatcher publishes them); wait until all have completed."""
        from evotrainer.fleet.registry import TaskSpec, request_tasks

        self.count += 1
        batch = f"b{self.count}-"
        now = time.time()
        specs = [TaskSpec("bench.mark", f"{batch}{i}", inputs={"sent_at": now}) for i in range(tasks)]
        for i, target in enumerate(self.refs):
            request_tasks(self.store, target, specs[i::len(self.refs)])
        # Every task has started once its mark is in; only then poll Postgres for the
        # last completions (polling all along would spend the fleet's CPU on counting).
        self.bench.wait_marks(tasks)
        deadline = time.monotonic() + 600
        while self.store.conn.execute(
            "SELECT count(*) FROM fleet_tasks WHERE state = 'completed' AND starts_with(task_id, %s)", (batch,)
        ).fetchone()[0] < tasks:  # type: ignore[index]
            if time.monotonic() > deadline:
                raise SystemExit(f"fleet run timed out; logs in {self.bench.logs}")
            time.sleep(0.002)

    def close(self) -> None:
        self.store.close()


class BareSide:
    """Bare Celery: two workers of a no-op task with the same settings."""

    name = "bare celery"

    def __init__(self, bench: Bench) -> None:
        for i in range(2):
            bench.start(f"bare{i}", [sys.executable, "-m", "celery", "-A", "bench.fleet:bare_app", "worker", "--pool",
                                     "threads", "--concurrency", "1", "--loglevel", "warning", "--without-gossip",
                                     "--without-mingle", "--without-heartbeat", "--queues", f"{bench.prefix}bare"])
        os.environ["BENCH_PREFIX"] = bench.prefix
        self.bench = bench
        self.app = make_bare_app()

    def one(self) -> None:
        self.app.send_task("bench.bare", args=[time.time()])

    def many(self, tasks: int) -> None:
        with self.app.producer_or_acquire() as producer:
            for _ in range(tasks):
                self.app.send_task("bench.bare", args=[time.time()], producer=producer)
        self.bench.wait_marks(tasks)

    def close(self) -> None:
        self.app.close()


def latencies(bench: Bench, side: FleetSide | BareSide, samples: int) -> list[float]:
    """Append-to-start latency of tasks sent one at a time (an idle fleet)."""
    found = []
    for _ in range(samples):
        _redis().delete(MARKS)
        side.one()
        bench.wait_marks(1)
        sent, started = bench.marks()[0]
        found.append(started - sent)
    return found


def throughput(side: FleetSide | BareSide, tasks: int) -> float:
    _redis().delete(MARKS)
    start = time.perf_counter()
    side.many(tasks)
    return tasks / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=2000,
                        help="tasks per throughput run (400 take a fifth of a second on bare Celery: too short)")
    parser.add_argument("--latency-samples", type=int, default=200,
                        help="one-at-a-time tasks for latency (a p99 needs a hundred or more)")
    parser.add_argument("--repeats", type=int, default=5, help="rounds, each running both sides; the median counts")
    parser.add_argument("--branches", type=int, default=1,
                        help="spread the throughput run's tasks over this many branches (1: every completion "
                             "appends to one branch, the worst case for the store's per-branch sequence)")
    parser.add_argument("--durable", action="store_true",
                        help="every outcome waits for the disk (EVOTRAINER_DURABLE_CLOSE_SECONDS=0)")
    args = parser.parse_args()
    if args.durable:
        os.environ["EVOTRAINER_DURABLE_CLOSE_SECONDS"] = "0"

    import tempfile

    from bench.common import LoadWatch, scratch_database, verdict

    prefix = f"evobench-{uuid.uuid4().hex[:8]}-"
    logs = Path(tempfile.mkdtemp(prefix="evotrainer-bench-fleet-"))
    rates: dict[str, list[float]] = {"bare celery": [], "evotrainer": []}
    lat: dict[str, list[float]] = {"bare celery": [], "evotrainer": []}
    with scratch_database() as url, LoadWatch() as load:
        bench = Bench(url, prefix, logs)
        sides: list[FleetSide | BareSide] = []
        try:
            sides = [BareSide(bench), FleetSide(bench, args.branches)]
            for side in sides:  # warm up: every worker connected and running
                _redis().delete(MARKS)
                for _ in range(6):
                    side.one()
                bench.wait_marks(6, timeout=300)
            # Alternate the two so that a noisy neighbour hurts both alike; keep the best.
            for _ in range(args.repeats):
                for side in sides:
                    lat[side.name] += latencies(bench, side, args.latency_samples // args.repeats)
                    rates[side.name].append(throughput(side, args.tasks))
        finally:
            for side in sides:
                side.close()
            bench.stop_all()
            for key in _redis().scan_iter(match=f"{prefix}*"):
                _redis().delete(key)
            _redis().delete(MARKS)
    # The two sides alternate, and each round's ratio compares runs made a few seconds
    # apart: this machine's speed drifts by tens of percent from minute to minute. The
    # median round counts (the best of each side would reward a lucky quiet moment).
    overheads = sorted(bare / fleet for bare, fleet in zip(rates["bare celery"], rates["evotrainer"], strict=True))
    overhead = statistics.median(overheads)
    bare_rate, fleet_rate = statistics.median(rates["bare celery"]), statistics.median(rates["evotrainer"])
    bare_lat, fleet_lat = lat["bare celery"], lat["evotrainer"]

    def ms(values: list[float], q: float) -> float:
        return 1000 * _percentile(values, q)

    print(f"Redis broker, 2 workers (threads pool, concurrency 1 each), {args.tasks} no-op tasks on "
          f"{args.branches} branch(es), {args.repeats} rounds; {len(fleet_lat)} latency samples; outcomes "
          + ("wait for the disk (--durable)" if args.durable else "of tasks this short do not wait for the disk"))
    print("throughput runs (tasks/s): " + "; ".join(
        f"{name} " + ", ".join(f"{r:.0f}" for r in found) for name, found in rates.items()))
    print(f"{'':28}{'bare celery':>14}{'evotrainer':>14}{'ratio':>10}")
    print(f"{'throughput (tasks/s), median':28}{bare_rate:14.1f}{fleet_rate:14.1f}{overhead:9.2f}x")
    for label, q in (("latency p50 (ms)", 0.5), ("latency p99 (ms)", 0.99)):
        print(f"{label:28}{ms(bare_lat, q):14.1f}{ms(fleet_lat, q):14.1f}{ms(fleet_lat, q) / ms(bare_lat, q):9.2f}x")
    p99_ratio = ms(fleet_lat, 0.99) / ms(bare_lat, 0.99)
    print(f"throughput overhead {overhead:.2f}x, median of the rounds ({overheads[0]:.2f}-{overheads[-1]:.2f}x),"
          f" target <= 2x: {verdict(overheads, 2.0, at_least=False)}")
    print(f"latency p99 {p99_ratio:.2f}x bare ({len(fleet_lat)} samples a side, pooled), target <= 3x:"
          f" {verdict([p99_ratio], 3.0, at_least=False)}; "
          f"mean latency {1000 * statistics.mean(bare_lat):.1f} ms vs {1000 * statistics.mean(fleet_lat):.1f} ms")
    print(load.line())

if __name__ == "__main__":
    main()
