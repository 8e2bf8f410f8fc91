"""Reading a branch into a DataFrame through the Python API, against pandas.read_sql of
the same rows over psycopg, same run.

    .venv/bin/python bench/api.py [--events 100000] [--rounds 7]

One branch of `--events` events (TaskRequested, small payloads) in a scratch database.
Each round runs, in an order that rotates from round to round (bench/common.py):
  pandas.read_sql   pandas.read_sql(the store's own SELECT of the branch's events, a psycopg connection)
  API               evotrainer.connect(url).events("bench/main").to_pandas()
each on a connection opened once, and times it from the query to the DataFrame. Both
parse the jsonb payloads into dicts and give one row per event with the same columns.
Target, on the median round: the API at most 1.5x pandas.read_sql.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas  # noqa: E402
import psycopg  # noqa: E402

import evotrainer  # noqa: E402
from bench.common import LoadWatch, paired_rounds, ratios, report_ratio, scratch_database, spread  # noqa: E402
from evotrainer.store import NewEvent, sql  # noqa: E402

BATCH = 1000
SAME_ROWS = sql.SELECT_EVENTS + " WHERE b.experiment = %(experiment)s AND b.name = %(branch)s ORDER BY e.seq"


def fill(db: evotrainer.Client, events: int) -> None:
    """Set-up, not measured: batches through the store (the client appends one at a time)."""
    db.create_experiment("bench")
    main = evotrainer.BranchRef("bench", "main")
    for start in range(1, events, BATCH):  # ExperimentCreated is the first
        batch = [NewEvent("TaskRequested", {"task_id": f"t{i}", "kind": "noop", "queue": "q"})
                 for i in range(start, min(start + BATCH, events))]  # fmt: skip
        db.store.append(main, batch)


def timed(read: Callable[[], pandas.DataFrame], events: int) -> Callable[[], float]:
    def run() -> float:
        start = time.perf_counter()
        frame = read()
        elapsed = time.perf_counter() - start
        if len(frame) != events:
            raise SystemExit(f"read {len(frame)} rows, not {events}")
        return elapsed

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000, help="events on the branch")
    parser.add_argument("--rounds", type=int, default=7, help="paired rounds; the median round counts")
    args = parser.parse_args()
    # pandas warns that it was not given an SQLAlchemy connectable: a plain DBAPI
    # connection is the baseline this measures.
    warnings.filterwarnings("ignore", message=".*SQLAlchemy connectable.*")
    with scratch_database() as url, LoadWatch() as load:
        with evotrainer.connect(url, actor="bench") as db, psycopg.connect(url, autocommit=True) as conn:
            started = time.perf_counter()
            fill(db, args.events)
            print(f"{args.events} events appended in {time.perf_counter() - started:.1f} s")
            params = {"experiment": "bench", "branch": "main"}
            sides = {
                "pandas.read_sql": timed(lambda: pandas.read_sql(SAME_ROWS, conn, params=params), args.events),
                "API": timed(lambda: db.events("bench/main").to_pandas(), args.events),
            }
            for side in sides.values():  # warm the page cache
                side()
            found = paired_rounds(sides, args.rounds)
    print(f"{args.rounds} paired rounds, sides in rotating order; seconds, median (lowest-highest):")
    for name, times in found.items():
        print(f"  {name:16s} {spread(times, 3)}")
    report_ratio(f"API / pandas.read_sql ({args.events} events)", ratios(found["API"], found["pandas.read_sql"]),
                 1.5, at_least=False, unit="x")  # fmt: skip
    print(load.line())


if __name__ == "__main__":
    main()
