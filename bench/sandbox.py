"""Sandboxed runs per second of a trivial program against a bare subprocess, same run.

    .venv/bin/python bench/sandbox.py [--runs 20] [--rounds 9]

Both sides start the same interpreter on the same one-line program; the bare side is
subprocess.run with no isolation. Each round times `--runs` starts of each side, back to
back in an order that rotates from round to round (bench/common.py), and takes the ratio
of the two rates within the round. Prints the median round's ratio with its spread, the
machine's load over the run, and whether the median meets the target (>= 0.6).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import LoadWatch, paired_rounds, ratios, report_ratio  # noqa: E402
from evotrainer.sandbox import SandboxConfig, Status, run_python  # noqa: E402
from evotrainer.sandbox.runner import bare_run  # noqa: E402

PROGRAM = "print(1)"
TARGET = 0.6


def rate_of(fn: Callable[[], None], runs: int) -> Callable[[], float]:
    """A side: starts per second over `runs` back-to-back starts."""

    def measure() -> float:
        start = time.perf_counter()
        for _ in range(runs):
            fn()
        return runs / (time.perf_counter() - start)

    return measure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="starts per side per round")
    parser.add_argument("--rounds", type=int, default=9, help="paired rounds; the median round counts")
    args = parser.parse_args()
    config = SandboxConfig()

    def sandboxed() -> None:
        result = run_python(PROGRAM, config=config)
        assert result.status is Status.PASSED, result

    def bare() -> None:
        assert bare_run([config.python, "-I", "-S", "-c", PROGRAM]) == 0

    sandboxed(), bare()  # the page cache and the interpreter's first start, untimed
    with LoadWatch() as load:
        found = paired_rounds({"bare": rate_of(bare, args.runs), "sandboxed": rate_of(sandboxed, args.runs)},
                              args.rounds)  # fmt: skip
    print(f"bare subprocess: median {statistics.median(found['bare']):7.1f} runs/s")
    print(f"sandboxed:       median {statistics.median(found['sandboxed']):7.1f} runs/s")
    report_ratio("sandboxed / bare (runs per second)", ratios(found["sandboxed"], found["bare"]), TARGET)
    print(load.line())


if __name__ == "__main__":
    main()
