"""Sandboxed runs per second of a trivial program against a bare subprocess, same run.

    python bench/sandbox.py [--runs 30] [--rounds 4]

Both sides start the same interpreter on the same one-line program; the bare side is
subprocess.run with no isolation. Prints both rates and their ratio (target >= 0.5).
"""

from __future__ import annotations

import argparse
import time

from evotrainer.sandbox import SandboxConfig, Status, run_python
from evotrainer.sandbox.runner import bare_run

PROGRAM = "print(1)"


def _rate(fn, runs: int) -> float:
    fn()  # warm the page cache and the interpreter's first start
    start = time.perf_counter()
    for _ in range(runs):
        fn()
    return runs / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    config = SandboxConfig()

    def sandboxed() -> None:
        result = run_python(PROGRAM, config=config)
        assert result.status is Status.PASSED, result

    def bare() -> None:
        assert bare_run([config.python, "-I", "-S", "-c", PROGRAM]) == 0

    # Interleave rounds so drift in machine load hits both sides alike; each side keeps
    # its best round (the least disturbed by other work on the machine).
    bare_rates, sandbox_rates = [], []
    for _ in range(args.rounds):
        bare_rates.append(_rate(bare, args.runs))
        sandbox_rates.append(_rate(sandboxed, args.runs))
    bare_rate, sandbox_rate = max(bare_rates), max(sandbox_rates)
    print(f"bare subprocess: {bare_rate:8.1f} runs/s")
    print(f"sandboxed:       {sandbox_rate:8.1f} runs/s")
    print(f"ratio sandboxed/bare: {sandbox_rate / bare_rate:.2f} (target >= 0.50)")


if __name__ == "__main__":
    main()
