"""The dashboard's lineage page on an experiment of 2,000 branches, against its SQL alone.

    .venv/bin/python bench/ui.py [--branches 2000] [--rounds 15]

Builds one experiment whose branches fork from random earlier ones, each forked for an
intervention proposed on main (so every edge has a label and a link), evaluated, and
judged by a PromotionDecided on main. Then, in paired rounds (bench/common.py):
  - page: GET /e/EXPERIMENT through the whole app (token check, projections catch-up,
    read-only transaction, the library's reads, layout, SVG and template), in process;
    the server time is the app's own Server-Timing header (until the response starts);
  - sql: the same SELECT statements the page ran, recorded while it ran, replayed on one
    connection inside the same read-only transaction, rows fetched and nothing else.
Targets: page at most 2x its SQL, and under 200 ms (medians over rounds).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg  # noqa: E402

from bench.common import LoadWatch, paired_rounds, ratios, report_ratio, scratch_database, spread  # noqa: E402
from evotrainer.lineage.readonly import read_only  # noqa: E402
from evotrainer.refs import BranchRef  # noqa: E402
from evotrainer.store import EventStore, NewEvent  # noqa: E402

EXPERIMENT = "wide"
SHA = "cd" * 32


def generate(store: EventStore, branches: int) -> None:
    rng = random.Random(0)
    store.create_experiment(EXPERIMENT, {"domain": "math"})
    main = BranchRef(EXPERIMENT, "main")
    names = ["main"]
    for b in range(branches - 1):
        parent = BranchRef(EXPERIMENT, rng.choice(names))
        iid = f"iv-{b:05d}"
        proposed = store.append(main, [NewEvent("InterventionProposed", {
            "intervention_id": iid, "field": "grpo.temperature", "old_value": 1.0, "new_value": round(rng.random(), 3),
            "hypothesis": "h", "success_criterion": "avg_at_k_gain >= 0.01", "rollback_plan": "r"})])[0]  # fmt: skip
        name = f"b{b:05d}"
        with store.transaction():
            head, _ = store.head(parent)
            store.fork(BranchRef(EXPERIMENT, parent.branch, head), name, f"intervention {iid}: grpo.temperature")
            child = BranchRef(EXPERIMENT, name)
            store.append(child, [
                NewEvent("HarnessVersioned", {"harness_hash": SHA, "spec": {}, "parent_hash": None,
                                              "changed_fields": ["grpo.temperature"]},
                         causation_id=proposed.event_id),
                NewEvent("EvaluationRecorded", {"request": {}, "policy_sha256": SHA, "metric": "avg@4",
                                                "avg_at_k": rng.random(), "pass_at_k": 0.5, "k": 4, "problems": 32,
                                                "results_sha256": SHA, "wall_seconds": 1.0}),
            ])  # fmt: skip
        store.append(main, [NewEvent("PromotionDecided", {
            "candidate": f"{EXPERIMENT}/{name}", "decision": "promoted" if rng.random() < 0.1 else "rejected",
            "intervention_id": iid, "candidate_score": rng.random(), "baseline_score": 0.5})])  # fmt: skip
        names.append(name)
        if (b + 1) % 500 == 0:
            print(f"  {b + 1} branches forked", file=sys.stderr)


@contextmanager
def recorded_selects() -> Iterator[list[tuple[Any, Any]]]:
    """Every SELECT (or WITH) a connection executes meanwhile, with its parameters."""
    seen: list[tuple[Any, Any]] = []
    original = psycopg.Connection.execute

    def recording(self, query, params=None, **kwargs):  # type: ignore[no-untyped-def]
        text = query if isinstance(query, str) else query.as_string(self)
        if text.lstrip().upper().startswith(("SELECT", "WITH")):
            seen.append((query, params))
        return original(self, query, params, **kwargs)

    psycopg.Connection.execute = recording  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        psycopg.Connection.execute = original  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--branches", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    from starlette.testclient import TestClient

    from evotrainer.ui.app import create_app

    with scratch_database() as url, EventStore.connect(url, actor="bench") as store:
        started = time.perf_counter()
        generate(store, args.branches)
        store.conn.execute("ANALYZE")
        print(f"generated {args.branches} branches in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        with TestClient(create_app(url)) as client:
            first = client.get(f"/e/{EXPERIMENT}")  # also catches the projections up
            assert first.status_code == 200 and first.text.count('class="node"') == args.branches, first.status_code
            with recorded_selects() as statements:
                client.get(f"/e/{EXPERIMENT}")
            conn = store.conn

            def page() -> float:
                answer = client.get(f"/e/{EXPERIMENT}")
                assert answer.status_code == 200
                return float(answer.headers["server-timing"].partition("dur=")[2]) / 1000

            def sql_alone() -> float:
                began = time.perf_counter()
                with read_only(conn, 10_000):
                    for query, params in statements:
                        conn.execute(query, params).fetchall()
                return time.perf_counter() - began

            with LoadWatch() as load:
                found = paired_rounds({"page": page, "sql": sql_alone}, args.rounds)
    ms = {side: [t * 1000 for t in times] for side, times in found.items()}
    print(f"lineage page of {args.branches} branches ({len(first.text) // 1024} KiB of HTML, "
          f"{len(statements)} SELECT statements), {args.rounds} paired rounds")  # fmt: skip
    print(f"page (server time)                           {spread(ms['page'], 1)} ms")
    print(f"its SQL alone                                {spread(ms['sql'], 1)} ms")
    ratio_met = report_ratio("page / its SQL", ratios(found["page"], found["sql"]), 2.0, at_least=False)
    fast = statistics.median(ms["page"]) < 200
    print(f"{'page under 200 ms':44s} {statistics.median(ms['page']):.1f} ms: {'met' if fast else 'not met'}")
    print(load.line())
    print("targets: " + ("met" if ratio_met and fast else "not met"))


if __name__ == "__main__":
    main()
