"""Lineage at scale: deep fork chains, the promotion audit, and projection rebuilds.

    .venv/bin/python bench/lineage.py [--events 1000000] [--branches 2000] [--depth 200]

Builds about `--events` events over `--branches` branches in 10 experiments; one
experiment holds a linear chain of `--depth` forks. Then it prints:
  - p50 of `branch_history` on the deepest branch, against a plain indexed read of the
    same number of event rows (by position) in the same run: target at most 2x;
  - p50 of `promotion_audit` for one experiment: target under 50 ms;
  - projection rebuild speed from the whole log: target at least 20k events/s.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import scratch_database  # noqa: E402
from evotrainer.lineage.projections import Projector, rebuild  # noqa: E402
from evotrainer.refs import BranchRef  # noqa: E402
from evotrainer.store import EventStore, NewEvent  # noqa: E402

EXPERIMENTS = 10
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


def p50(fn, repeats: int = 9) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--branches", type=int, default=2000)
    parser.add_argument("--depth", type=int, default=200)
    args = parser.parse_args()
    with scratch_database() as url, EventStore.connect(url, actor="bench") as store:
        started = time.perf_counter()
        deepest = generate(store, args.events, args.branches, args.depth)
        total = store.conn.execute("SELECT count(*) FROM events").fetchone()[0]
        print(f"generated {total} events in {time.perf_counter() - started:.0f}s", file=sys.stderr)
        store.conn.execute("ANALYZE")
        conn = store.conn
        rows = conn.execute("SELECT count(*) FROM branch_history(%s)", (deepest,)).fetchone()[0]
        depth = conn.execute("SELECT max(depth) FROM branch_ancestry(%s)", (deepest,)).fetchone()[0]
        history = p50(lambda: conn.execute("SELECT * FROM branch_history(%s)", (deepest,)).fetchall())
        low = conn.execute("SELECT min(position) FROM events").fetchone()[0]
        plain = p50(lambda: conn.execute(
            "SELECT e.*, b.experiment, b.name FROM events e JOIN branches b USING (branch_id)"
            " WHERE e.position >= %s ORDER BY e.position LIMIT %s", (low, rows)).fetchall())

        started = time.perf_counter()
        Projector(store).catch_up()
        caught_up = time.perf_counter() - started
        audit_p50 = p50(lambda: conn.execute("SELECT * FROM promotion_audit WHERE experiment = 'bench3'").fetchall())
        audit_rows = len(conn.execute("SELECT 1 FROM promotion_audit WHERE experiment = 'bench3'").fetchall())

        scratch = f"bench_{uuid.uuid4().hex[:8]}"
        started = time.perf_counter()
        rebuilt = rebuild(store, scratch)
        rebuild_rate = rebuilt / (time.perf_counter() - started)
        conn.execute(f'DROP SCHEMA "{scratch}" CASCADE')

    print(f"events {total}, branches {args.branches}, deepest lineage {depth} forks ({rows} events in its history)")
    print(f"branch_history(deepest)   p50 {history * 1000:8.1f} ms")
    print(f"plain indexed read        p50 {plain * 1000:8.1f} ms  (same {rows} rows)")
    print(f"  ratio                   = {history / plain:.2f}   (target <= 2.00)")
    print(f"promotion_audit (1 exp)   p50 {audit_p50 * 1000:8.1f} ms  ({audit_rows} decisions; target < 50 ms)")
    print(f"projection catch-up       {total / caught_up:8.0f} events/s")
    print(f"projection rebuild        {rebuild_rate:8.0f} events/s  (target >= 20000)")


if __name__ == "__main__":
    main()
