"""How fast the CLI answers, as a process, against a bare psycopg process, same run.

    .venv/bin/python bench/cli.py [--rounds 15]

Each round starts, in an order that rotates from round to round (bench/common.py):
  bare psycopg        python -c "import psycopg; psycopg.connect(URL).execute('select 1')"
  evotrainer sql      evotrainer sql "select 1"   (the projections caught up beforehand)
  evotrainer --help
and times each from start to exit. Targets, on the median round: `evotrainer sql` at most
2x the bare process; `evotrainer --help` under 150 ms. Both run the same interpreter with
the same environment; the CLI as `python -m evotrainer`, which is what the console script
runs, so that the checkout's code is the one measured.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import LoadWatch, paired_rounds, ratios, report_ratio, scratch_database, spread  # noqa: E402

BARE = "import psycopg, sys; psycopg.connect(sys.argv[1]).execute('select 1').fetchall()"


def timed_process(argv: list[str], env: dict[str, str]) -> Callable[[], float]:
    """A side: seconds from starting `argv` to its exit (it must succeed)."""

    def run() -> float:
        start = time.perf_counter()
        done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
        elapsed = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv[:4])} failed: {done.stderr.decode().strip()}")
        return elapsed

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="paired rounds; the median round counts")
    args = parser.parse_args()
    root = str(Path(__file__).resolve().parents[1])
    with scratch_database() as url, LoadWatch() as load:
        env = {**os.environ, "EVOTRAINER_DATABASE_URL": url,
               "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        cli = [sys.executable, "-m", "evotrainer"]
        subprocess.run([*cli, "experiment", "create", "bench"], env=env, check=True, stdout=subprocess.DEVNULL)
        sides = {
            "bare psycopg": timed_process([sys.executable, "-c", BARE, url], env),
            "evotrainer sql": timed_process([*cli, "sql", "select 1"], env),
            "evotrainer --help": timed_process([*cli, "--help"], env),
        }
        for side in sides.values():  # warm the page cache and the projections
            side()
        found = paired_rounds(sides, args.rounds)
    ms = {name: [1000 * t for t in times] for name, times in found.items()}
    print(f"{args.rounds} paired rounds, sides in rotating order; ms per process, median (lowest-highest):")
    for name, times in ms.items():
        print(f"  {name:20s} {spread(times, 1)}")
    report_ratio("evotrainer sql / bare psycopg process", ratios(ms["evotrainer sql"], ms["bare psycopg"]), 2.0,
                 at_least=False, unit="x")
    report_ratio("evotrainer --help", ms["evotrainer --help"], 150, at_least=False, unit=" ms")
    print(load.line())


if __name__ == "__main__":
    main()
