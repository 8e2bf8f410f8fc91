"""Lineage at scale: deep fork chains, the promotion audit, and projection rebuilds.

    .venv/bin/python bench/lineage.py [--events 1000000] [--branches 2000] [--depth 200] [--rounds 5]

Builds about `--events` events over `--branches` branches in 10 experiments, once and
untimed; one experiment holds a linear chain of `--depth` forks. Then `--rounds` paired
rounds (bench/common.py) of
  branch_history    p50 of 9 reads of the deepest branch's history
  plain read        p50 of 9 plain indexed reads of as many event rows (by position)
back to back, in an order that rotates from round to round, the ratio taken within each
round; then the live projection's first catch-up (one run, for scale: no target); then
`--rounds` rounds, again in rotating order, of
  promotion_audit   p50 of 9 reads of the audit for one experiment
  rebuild           the projections rebuilt from the whole log into a scratch schema
Targets, on the median round:
  - branch_history / plain read at most 2;
  - promotion_audit p50 at most 50 ms;
  - projection rebuild at least 30,000 events/s.
Each figure is printed as median (lowest-highest), with the machine's load over the
rounds.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import LoadWatch, paired_rounds, ratios, report_ratio, scratch_database, spread  # noqa: E402
from evotrainer.lineage.projections import Projector, rebuild  # noqa: E402
from evotrainer.refs import BranchRef  # noqa: E402
from evotrainer.store import EventStore, NewEvent  # noqa: E402

EXPERIMENTS = 10
REBUILD_TARGET = 30_000  # events/s (issue 17 raised it from 20,000)
SHA = "ab" * 32


def filler(n: int, prefix: str) -> list[NewEvent]:
    """A realistic mix: task requests and completions, evaluations now and then."""
    events = []
    for i in range(n):
        task_id = f"{prefix}-{i // 2}"
        if i % 2 == 0:
            events.append(NewEvent("TaskRequested", {"task_id": task_id, "kind": "rollout", "queue": "rollout",
                                                     "inputs": {"policy": SHA, "group_size": 8}}))
        else:
            events.append(NewEvent("TaskCompleted", {"task_id": task_id, "worker": "w1", "attempt": 1,
                                                     "outputs": {"evidence": SHA}, "duration_s": 1.5}))
    return events


def decision(store: EventStore, experiment: str, parent: BranchRef, child: str, rng: random.Random) -> None:
    iid = f"i-{child}"
    store.append(parent, [
        NewEvent("InterventionProposed", {"intervention_id": iid, "field": "grpo.temperature", "new_value": 1.1,
                                          "hypothesis": "h", "success_criterion": "c", "rollback_plan": "r"}),
        NewEvent("BacktestCompleted", {"intervention_id": iid, "kind": "reward", "evidence": SHA,
                                       "figures": {"rescued": rng.randint(0, 9)}, "passed": True}),
    ])
    store.append(BranchRef(experiment, child), [
        NewEvent("DiagnosisRecorded", {"evidence": SHA, "findings": [], "conditions": ["insufficient_signal"]}),
        NewEvent("EvaluationRecorded", {"request": {}, "policy_sha256": SHA, "metric": "avg@8",
                                        "avg_at_k": rng.random(), "pass_at_k": 0.5, "k": 8, "problems": 32,
                                        "results_sha256": SHA, "wall_seconds": 1.0}),
    ])
    store.append(parent, [NewEvent("PromotionDecided", {
        "candidate": f"{experiment}/{child}", "decision": rng.choice(["promoted", "rejected"]),
        "intervention_id": iid, "candidate_score": rng.random(), "baseline_score": 0.5})])


def generate(store: EventStore, events: int, branches: int, depth: int) -> str:
    rng = random.Random(0)
    per_branch = max(10, events // branches)
    deepest = ""
    made = 0
    for e in range(EXPERIMENTS):
        experiment = f"bench{e}"
        store.create_experiment(experiment)
        refs = [BranchRef(experiment, "main")]
        store.append(refs[0], filler(per_branch, "main"))
        count = max(branches // EXPERIMENTS, depth + 1) if e == 0 else branches // EXPERIMENTS
        for b in range(count - 1):
            # Experiment 0 is one linear chain (the deepest lineage); the others fork at random.
            parent = refs[-1] if e == 0 and b < depth else rng.choice(refs)
            head, _ = store.head(parent)
            name = f"b{b}"
            store.fork(BranchRef(experiment, parent.branch, head if e == 0 else rng.randint(1, head)), name)
            refs.append(BranchRef(experiment, name))
            store.append(refs[-1], filler(per_branch, name))
            decision(store, experiment, parent, name, rng)
            made += 1
            if e == 0 and b < depth:
                deepest = f"{experiment}/{name}"
        print(f"  generated experiment {experiment}: {len(refs)} branches", file=sys.stderr)
    return deepest


def scalar(conn: psycopg.Connection[Any], query: str, params: tuple[Any, ...] = ()) -> Any:
    """The first column of the one row `query` returns."""
    row = conn.execute(query, params).fetchone()
    assert row is not None, query
    return row[0]


def p50(fn: Callable[[], object], repeats: int = 9) -> float:
    """Seconds of the median of `repeats` calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def rebuild_rate(store: EventStore) -> float:
    """Events/s of one rebuild of the projections from the whole log, into a scratch
    schema dropped afterwards (outside the clock)."""
    scratch = f"bench_{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    rebuilt = rebuild(store, scratch)
    rate = rebuilt / (time.perf_counter() - started)
    store.conn.execute(f'DROP SCHEMA "{scratch}" CASCADE')
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="events to build, over all branches")
    parser.add_argument("--branches", type=int, default=2000, help="branches to build, over 10 experiments")
    parser.add_argument("--depth", type=int, default=200, help="forks in the deepest lineage's linear chain")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each series; the median round counts")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    with scratch_database() as url, EventStore.connect(url, actor="bench") as store:
        started = time.perf_counter()
        deepest = generate(store, args.events, args.branches, args.depth)
        total = scalar(store.conn, "SELECT count(*) FROM events")
        print(f"generated {total} events in {time.perf_counter() - started:.0f}s", file=sys.stderr)
        store.conn.execute("ANALYZE")
        conn = store.conn
        rows = scalar(conn, "SELECT count(*) FROM branch_history(%s)", (deepest,))
        depth = scalar(conn, "SELECT max(depth) FROM branch_ancestry(%s)", (deepest,))
        low = scalar(conn, "SELECT min(position) FROM events")

        def history() -> float:
            return p50(lambda: conn.execute("SELECT * FROM branch_history(%s)", (deepest,)).fetchall())

        def plain() -> float:
            return p50(lambda: conn.execute(
                "SELECT e.*, b.experiment, b.name FROM events e JOIN branches b USING (branch_id)"
                " WHERE e.position >= %s ORDER BY e.position LIMIT %s", (low, rows)).fetchall())

        def audit_ms() -> float:
            return 1000 * p50(lambda: conn.execute(
                "SELECT * FROM promotion_audit WHERE experiment = 'bench3'").fetchall())

        with LoadWatch() as load:
            reads = paired_rounds({"branch_history": history, "plain read": plain}, args.rounds)
            # The audit reads the live projection: it must be caught up first.
            started = time.perf_counter()
            Projector(store).catch_up()
            caught_up = time.perf_counter() - started
            others = paired_rounds({"promotion_audit": audit_ms, "rebuild": lambda: rebuild_rate(store)},
                                   args.rounds)  # fmt: skip
        audit_rows = len(conn.execute("SELECT 1 FROM promotion_audit WHERE experiment = 'bench3'").fetchall())

    print(f"events {total}, branches {args.branches}, deepest lineage {depth} forks ({rows} events in its history);"
          f" load average (1 min) before the build {load_before:.2f}")
    print(f"{args.rounds} paired rounds of the two reads ({rows} rows each), sides in rotating order;"
          " p50 of 9 reads, ms, median (lowest-highest):")
    for name, times in reads.items():
        print(f"  {name:42s} {spread([1000 * t for t in times], 1)}")
    report_ratio("  branch_history / plain read", ratios(reads["branch_history"], reads["plain read"]), 2.0,
                 at_least=False)
    print(f"{args.rounds} rounds of the audit and the rebuild, in rotating order, median (lowest-highest):")
    report_ratio(f"  promotion_audit p50 ({audit_rows} decisions)", others["promotion_audit"], 50, at_least=False,
                 unit=" ms", digits=1)  # fmt: skip
    report_ratio("  projection rebuild", others["rebuild"], REBUILD_TARGET, unit=" events/s", digits=0)
    print(f"{'  projection catch-up (one run, no target)':44s} {total / caught_up:.0f} events/s")
    print(load.line())


if __name__ == "__main__":
    main()
