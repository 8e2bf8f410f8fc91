"""Chaos: real kills of a running loop, checked against the same loop run uninterrupted.

    python -m tests.fleet.chaos --rounds 5          # `make chaos`: prints matched/total
    python -m tests.fleet.chaos --rounds 1 --broker amqp --seed 7

A round runs `evotrainer run` (the controller) on a real broker with a dispatcher and two
workers, every one a process started here, and at seeded random moments SIGKILLs the
controller, a worker in the middle of a training task, and the dispatcher, restarting
each after a moment, and terminates the controller's database connections
(pg_terminate_backend). It matches when, at the end, the lineage equals the reference run's
(the same experiment run once, uninterrupted, with the same seed): per branch, the event
types in order with their payloads less what the clock and the host decide (timings,
worker names, environments, event ids, seqs); `evotrainer audit` and `evotrainer replay`
of a candidate exit 0; nothing is recorded twice; and no fault was recorded as a verdict
(no task failed but by running out of attempts, no candidate rejected for a failure).
Work whose attempts ran out is a fault the controller asks again for (`-r2`); those
requests and their AttemptsExhausted are the only events the kills may add.

Only processes this module started are ever signalled, by PID. The databases it creates
are dropped, and its broker queues deleted, at the end of each run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from tests.conftest import ADMIN_URL, url_for
from tests.fleet.conftest import BROKERS, ROOT, Fleet, purge, require_broker
from tests.processes import end_processes

EXPERIMENT = "chaos"
LOOP = f"""name = "{EXPERIMENT}"
domain = "math:digit_add"
policy = "tiny"
iterations = {{iterations}}
[harness.grpo]
max_steps = 8
num_generations = 4
prompts_per_step = 2
[harness.evaluation]
k = 2
eval_tasks = 4
"""
"""Candidates of 8 and (a longer run is the first idea here) 16 GRPO steps: training tasks
of a few seconds, long enough to be killed in the middle. Two by default; CI runs one."""

VOLATILE = frozenset({
    "environment", "worker", "attempt", "duration_s", "event_id", "seq", "fork_seq", "fork_hash",
    "wall_seconds", "cpu_seconds", "gpu_seconds", "recorded_at", "started_at", "finished_at",
})  # fmt: skip
"""Payload fields the clock, the host or the position in the log decide: left out of the
comparison. Everything else (hashes, scores, decisions, requests) must be equal."""
LOST = "AttemptsExhausted"
CONTROLLER_APP = "evotrainer-chaos-controller"
"""The controller's application_name (PGAPPNAME), to find its database connections."""


def _stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in sorted(value.items()) if k not in VOLATILE}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    if isinstance(value, str):
        return re.sub(r"-r\d+$", "", value)  # a task asked for again is the same work
    return value


def lineage(database_url: str) -> dict[str, list[tuple[str, str]]]:
    """Each branch's own events as (type, stable payload), fault records left out: a
    request that ran out of attempts and its AttemptsExhausted."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT b.name, e.type, e.payload FROM events e JOIN branches b USING (branch_id)"
            " WHERE b.experiment = %s ORDER BY b.name, e.seq", (EXPERIMENT,)).fetchall()  # fmt: skip
    lost = {p["task_id"] for _, type_, p in rows if type_ == "TaskFailed" and p.get("error_class") == LOST}
    out: dict[str, list[tuple[str, str]]] = {}
    for branch, type_, payload in rows:
        if type_ in ("TaskRequested", "TaskFailed") and payload.get("task_id") in lost:
            continue
        out.setdefault(branch, []).append((type_, json.dumps(_stable(payload), sort_keys=True)))
    return out


def differences(reference: dict[str, list[tuple[str, str]]], got: dict[str, list[tuple[str, str]]]) -> list[str]:
    """What differs, one line each (empty: the same lineage)."""
    found = []
    for branch in sorted(set(reference) | set(got)):
        want, have = reference.get(branch), got.get(branch)
        if want is None or have is None:
            found.append(f"branch {branch}: only in the {'chaos' if want is None else 'reference'} run")
            continue
        for n, (a, b) in enumerate(zip(want, have, strict=False)):
            if a != b:
                found.append(f"{branch}: event {n + 1} differs: {a[0]} {a[1][:300]} != {b[0]} {b[1][:300]}")
                break
        else:
            if len(want) != len(have):
                found.append(f"{branch}: {len(want)} events in the reference, {len(have)} here: "
                             f"{[t for t, _ in (have[len(want):] or want[len(have):])]}")  # fmt: skip
    return found


def faults_as_verdicts(database_url: str) -> list[str]:
    """Faults recorded as if they said something about the work: a task that failed for
    any reason but running out of attempts (the kills can only cause that), and a candidate
    rejected for a failure. (A result recorded twice shows as a difference in the lineage.)"""
    with psycopg.connect(database_url, autocommit=True) as conn:
        failed = conn.execute("SELECT payload->>'task_id', payload->>'error_class', payload->>'message' FROM events"
                              " WHERE type = 'TaskFailed' AND payload->>'error_class' <> %s", (LOST,)).fetchall()
        unrunnable = conn.execute("SELECT payload->>'candidate', payload->>'reason' FROM events"
                                  " WHERE type = 'PromotionDecided' AND payload->'evidence' ? 'failure'").fetchall()
    return ([f"task {t} failed: {c}: {m}" for t, c, m in failed]
            + [f"{c} rejected for a fault: {r}" for c, r in unrunnable])


@contextmanager
def scratch_database(prefix: str) -> Iterator[str]:
    """A fresh database migrated by the real Alembic, dropped afterwards."""
    from evotrainer.store import migrate

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        migrate.upgrade(url_for(name))
        yield url_for(name)
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass
class Chaos:
    """The kills of one round, drawn from its seed: each at a count of recorded events
    (points in the loop's progress), the worker's at a moment into a training task."""

    seed: int
    controller_at: list[int]
    dispatcher_at: list[int]
    connections_at: list[int]
    worker_in_train: list[tuple[int, float]]
    """(which training task, 1-based; seconds into it)."""
    restart_after_s: list[float] = field(default_factory=list)

    @classmethod
    def draw(cls, seed: int, events: int, trains: int, kills: int = 1) -> Chaos:
        rng = random.Random(seed)

        def points() -> list[int]:
            return sorted(rng.randint(4, max(5, events - 4)) for _ in range(kills))

        return cls(seed, points(), points(), points(),
                   sorted((rng.randint(1, trains), rng.uniform(0.3, 2.5)) for _ in range(kills)),
                   [rng.uniform(0.2, 3.0) for _ in range(4 * kills)])  # fmt: skip

    def describe(self) -> str:
        trains = ", ".join(f"train {n} +{s:.1f}s" for n, s in self.worker_in_train)
        return (f"controller at events {self.controller_at}, dispatcher at {self.dispatcher_at}, "
                f"connections at {self.connections_at}, worker in {trains}")  # fmt: skip


@dataclass
class Outcome:
    seed: int
    broker: str
    matched: bool
    wall_s: float
    kills: list[str]
    problems: list[str]
    pickups_s: list[float]


def environment(database_url: str, home: Path, artifacts: Path, broker_url: str | None) -> dict[str, str]:
    # The pytest run's warm-start cache is kept (tests/conftest.py): the same tiny policy.
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVOTRAINER_") or k == "EVOTRAINER_TINY_CACHE"}
    env.update({
        "EVOTRAINER_DATABASE_URL": database_url,
        "EVOTRAINER_HOME": str(home),
        "EVOTRAINER_ARTIFACTS": str(artifacts),  # shared: the tiny warm start is built once
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p),
        "PYTHONUNBUFFERED": "1",
    })  # fmt: skip
    if broker_url:
        env["EVOTRAINER_BROKER_URL"] = broker_url
        env["EVOTRAINER_QUEUE_PREFIX"] = f"evochaos-{uuid.uuid4().hex[:8]}-"
    return env


def reference_run(database_url: str, workdir: Path, artifacts: Path, iterations: int = 2) -> float:
    """The loop run once, uninterrupted, its tasks in the controller's process."""
    (workdir / "loop.toml").write_text(LOOP.format(iterations=iterations))
    env = environment(database_url, workdir / "home-reference", artifacts, None)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "evotrainer", "run", str(workdir / "loop.toml")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"the reference run failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return time.monotonic() - started


class _Round:
    """One chaos run: the fleet, the controller, the kills and their restarts."""

    def __init__(self, fleet: Fleet, config: Path, chaos: Chaos, say: Any) -> None:
        self.fleet, self.config, self.chaos, self.say = fleet, config, chaos, say
        self.restarts = iter(chaos.restart_after_s)
        self.kills: list[str] = []
        self.pickups: list[float] = []
        self.pending: list[tuple[float, str]] = []  # (monotonic time, what) to restart

    def run(self, timeout_s: float) -> subprocess.Popen[bytes]:
        fleet = self.fleet
        self.dispatcher = fleet.start("dispatcher")
        self.workers = [self._worker() for _ in range(2)]
        self.controller = self._controller()
        controller_at, dispatcher_at = list(self.chaos.controller_at), list(self.chaos.dispatcher_at)
        connections_at, in_train = list(self.chaos.connections_at), list(self.chaos.worker_in_train)
        trains_seen: list[str] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._restart_due()
            if self.controller.poll() is not None and not any(w == "controller" for _, w in self.pending):
                if self.controller.returncode == 0:
                    return self.controller
                raise RoundFailed(f"the controller exited with {self.controller.returncode}")
            events = fleet.query("SELECT count(*) FROM events")[0][0]
            if connections_at and events >= connections_at[0]:
                cut = fleet.query("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                                  " WHERE datname = current_database() AND application_name = %s",
                                  (CONTROLLER_APP,))[0][0]  # fmt: skip
                if cut:  # (none while the controller is down or connecting again: later, then)
                    connections_at.pop(0)
                    self.kills.append(f"{cut} controller connections terminated at {events} events")
            if controller_at and events >= controller_at[0]:
                controller_at.pop(0)
                self._kill(self.controller, "controller", f"at {events} events")
            if dispatcher_at and events >= dispatcher_at[0]:
                dispatcher_at.pop(0)
                self._kill(self.dispatcher, "dispatcher", f"at {events} events")
            for task_id, worker in fleet.query(
                    "SELECT task_id, worker FROM fleet_tasks"
                    " WHERE kind = 'train' AND state = 'running' ORDER BY requested_at"):  # fmt: skip
                base = re.sub(r"-r\d+$", "", task_id)
                if base not in trains_seen:
                    trains_seen.append(base)
                if in_train and in_train[0][0] == trains_seen.index(base) + 1:
                    nth, into_s = in_train.pop(0)
                    if not self._kill_worker_in_train(task_id, worker, into_s):
                        in_train.insert(0, (nth + 1, into_s / 2))  # it finished first: the next one, sooner
            time.sleep(0.1)
        raise RoundFailed(f"the run did not finish within {timeout_s:g} s")

    def _controller(self) -> subprocess.Popen[bytes]:
        # Named (libpq reads PGAPPNAME), so that its connections can be found and cut.
        return self.fleet.start("run", str(self.config), env={"PGAPPNAME": CONTROLLER_APP})

    def _worker(self) -> subprocess.Popen[bytes]:
        return self.fleet.start("worker", "--loglevel", "info")  # every queue

    def _kill(self, proc: subprocess.Popen[bytes], what: str, when: str) -> None:
        if proc.poll() is not None:
            return  # already down (waiting for its restart)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        self.kills.append(f"{what} (pid {proc.pid}) SIGKILLed {when}")
        self.pending.append((time.monotonic() + next(self.restarts, 1.0), what))

    def _kill_worker_in_train(self, task_id: str, holder: str, into_s: float) -> bool:
        """SIGKILL the worker running `task_id` `into_s` seconds on, and measure how soon
        the task starts again; False when it finished first."""
        pid = int(holder.rpartition(":")[2])
        ours = next((w for w in self.workers if w.pid == pid and w.poll() is None), None)
        if ours is None:
            return False  # not a process this round started: never signalled
        time.sleep(into_s)
        running = self.fleet.query("SELECT attempts FROM fleet_tasks WHERE task_id = %s AND state = 'running'"
                                   " AND worker = %s", (task_id, holder))  # fmt: skip
        if not running:
            return False
        (killed_at_db,) = self.fleet.query("SELECT clock_timestamp()")[0]
        self._kill(ours, "worker", f"{into_s:.1f} s into {task_id} attempt {running[0][0]}")
        self.workers.remove(ours)
        killed_at = time.monotonic()
        # Its next attempt, or, when that was its last, the same work asked for again (-rN).
        base = re.sub(r"-r\d+$", "", task_id)
        deadline = killed_at + 120
        while not self.fleet.query(
                "SELECT 1 FROM fleet_attempts a JOIN fleet_tasks t USING (event_id)"
                " WHERE (t.task_id = %s OR t.task_id ~ %s) AND a.started_at > %s",
                (base, f"^{re.escape(base)}-r[0-9]+$", killed_at_db)):  # fmt: skip
            # Restarts go on meanwhile: a dispatcher killed earlier is what requeues it on Redis.
            self._restart_due()
            if time.monotonic() > deadline:
                raise RoundFailed(f"{task_id} did not start again within 120 s of its worker's kill")
            time.sleep(0.1)
        self.pickups.append(time.monotonic() - killed_at)
        self.say(f"  the killed worker's {task_id} started again after {self.pickups[-1]:.1f} s")
        return True

    def _restart_due(self) -> None:
        now = time.monotonic()
        for due in [p for p in self.pending if p[0] <= now]:
            self.pending.remove(due)
            what = due[1]
            if what == "controller":
                self.controller = self._controller()
            elif what == "dispatcher":
                self.dispatcher = self.fleet.start("dispatcher")
            else:
                self.workers.append(self._worker())


class RoundFailed(Exception):
    """The chaos run itself did not finish."""


def chaos_round(seed: int, broker: str, reference: dict[str, list[tuple[str, str]]], workdir: Path,
                artifacts: Path, db_prefix: str, say: Any = print, timeout_s: float = 900,
                kills: int = 1, iterations: int = 2) -> Outcome:  # fmt: skip
    """One round: the loop under `Chaos.draw(seed)`, compared with the reference lineage."""
    url = BROKERS[broker]
    require_broker(url)
    trains = sum(t == "TrainingCompleted" for events in reference.values() for t, _ in events)
    chaos = Chaos.draw(seed, sum(len(v) for v in reference.values()), trains, kills)
    say(f"round {seed} on {broker}: {chaos.describe()}")
    logs = workdir / f"logs-{seed}-{broker}"
    logs.mkdir(parents=True, exist_ok=True)
    config = workdir / "loop.toml"
    config.write_text(LOOP.format(iterations=iterations))
    started = time.monotonic()
    problems: list[str] = []
    with scratch_database(db_prefix) as database_url:
        env = environment(database_url, workdir / f"home-{seed}-{broker}", artifacts, url)
        fleet = Fleet(broker, env, database_url, logs)
        run = _Round(fleet, config, chaos, say)
        try:
            run.run(timeout_s)
        except RoundFailed as exc:
            problems.append(f"{exc}\n{fleet.tail_logs(15)}")
        finally:
            end_processes(fleet.procs)
            purge(url, env["EVOTRAINER_QUEUE_PREFIX"])
        if not problems:
            problems += differences(reference, lineage(database_url))
            problems += faults_as_verdicts(database_url)
            problems += _cli_checks(env)
    wall = time.monotonic() - started
    return Outcome(seed, broker, not problems, wall, run.kills, problems, run.pickups)


def _cli_checks(env: dict[str, str]) -> list[str]:
    """`evotrainer audit` of every branch, and `replay` of the first candidate, exit 0."""
    env = {k: v for k, v in env.items() if k != "EVOTRAINER_BROKER_URL"}
    found = []
    with psycopg.connect(env["EVOTRAINER_DATABASE_URL"], autocommit=True) as conn:
        row = conn.execute("SELECT payload->>'candidate' FROM events WHERE type = 'PromotionDecided'"
                           " ORDER BY position LIMIT 1").fetchone()  # fmt: skip
    commands = [["audit"]] + ([["replay", row[0]]] if row else [])
    for args in commands:
        done = subprocess.run([sys.executable, "-m", "evotrainer", *args], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=600, check=False)  # fmt: skip
        if done.returncode != 0:
            found.append(f"evotrainer {' '.join(args)} exited {done.returncode}: {done.stdout[-1500:]}"
                         f"{done.stderr[-1500:]}")  # fmt: skip
    if not row:
        found.append("no candidate was judged: nothing to replay")
    return found


def reference_lineage(
    workdir: Path, artifacts: Path, db_prefix: str, iterations: int = 2
) -> tuple[dict[str, list[tuple[str, str]]], float]:
    with scratch_database(db_prefix) as database_url:
        wall = reference_run(database_url, workdir, artifacts, iterations)
        return lineage(database_url), wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0, help="Seed of the first round (the next ones follow it).")
    parser.add_argument("--broker", choices=["redis", "amqp", "both"], default="both",
                        help="both: the rounds alternate, Redis first.")  # fmt: skip
    parser.add_argument("--kills", type=int, default=1, help="Kills of each kind per round.")
    parser.add_argument("--db-prefix", default="evochaos", help="Names of the scratch databases (dropped after).")
    args = parser.parse_args(argv)
    brokers = ["redis", "amqp"] if args.broker == "both" else [args.broker]
    with tempfile.TemporaryDirectory(prefix="evochaos-") as tmp:
        workdir, artifacts = Path(tmp), Path(tmp) / "artifacts"
        reference, wall = reference_lineage(workdir, artifacts, args.db_prefix)
        events = sum(len(v) for v in reference.values())
        print(f"reference: {len(reference)} branches, {events} events, uninterrupted in {wall:.0f} s", flush=True)
        outcomes = []
        for n in range(args.rounds):
            seed, broker = args.seed + n, brokers[n % len(brokers)]
            outcome = chaos_round(seed, broker, reference, workdir, artifacts, args.db_prefix,
                                  say=lambda line: print(line, flush=True), kills=args.kills)  # fmt: skip
            outcomes.append(outcome)
            for kill in outcome.kills:
                print(f"  {kill}")
            verdict = "matched" if outcome.matched else "DIFFERED"
            print(f"round {seed} on {broker}: {verdict} in {outcome.wall_s:.0f} s", flush=True)
            for problem in outcome.problems:
                print(f"  ! {problem}")
        matched = sum(o.matched for o in outcomes)
        pickups = [p for o in outcomes for p in o.pickups_s]
        kills = sum(len(o.kills) for o in outcomes)
        slowest = f", a killed worker's task started again after at most {max(pickups):.1f} s" if pickups else ""
        print(f"matched {matched}/{len(outcomes)} ({kills} kills{slowest})")
        return 0 if matched == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
