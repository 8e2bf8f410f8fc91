"""Benchmark: diagnosing 100k stored rollouts against reading the evidence artifact alone,
and backtest re-scoring throughput.

The evidence is synthetic but shaped like a real run (groups of 8, 50 steps, math-style
reward components, short completions), stored in a temporary artifact store. Baseline:
fetch and verify the artifact and parse it into RolloutRecords (what any reader must do).
Diagnosis: the same read plus the whole default three-layer suite and the rule engine.
Each of `--rounds` paired rounds times both, back to back in an order that rotates from
round to round (bench/common.py), and takes the ratio within the round. Target, on the
median round: diagnosis at most 3x the read. Then `--rounds` rounds, again in rotating
order, of re-scoring the rollouts with a candidate's reward weights and of the whole
reward backtest (rollouts/s, no target). Every figure is printed as median (lowest-
highest), with the machine's load over the run.

    .venv/bin/python bench/diagnose.py [--rollouts 100000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import LoadWatch, paired_rounds, ratios, report_ratio, spread  # noqa: E402
from evotrainer.artifacts import open_store  # noqa: E402
from evotrainer.backtest import rescore, reward_backtest  # noqa: E402
from evotrainer.backtest.replay import Figures  # noqa: E402
from evotrainer.diagnostics import Diagnosis, diagnose  # noqa: E402
from evotrainer.diagnostics.inputs import diagnosis_input, read_evidence  # noqa: E402
from evotrainer.evidence import RolloutRecord, to_jsonl  # noqa: E402
from evotrainer.harness import HarnessSpec  # noqa: E402


def synthetic(n: int, group_size: int = 8, steps: int = 50, seed: int = 0) -> list[RolloutRecord]:
    rng = random.Random(seed)
    per_step = max(n // steps, group_size)
    out = []
    for i in range(n):
        step, group, index = i // per_step, i // group_size, i % group_size
        p = 0.2 + 0.5 * step / steps
        correct = float(rng.random() < p)
        fmt = float(correct or rng.random() < 0.5)
        answer = str(rng.randint(0, 99)) if rng.random() < 0.9 else "12 12 12 12 12 12 12"
        out.append(RolloutRecord(step, group, index, f"math-{group % 500}", answer, 6, len(answer) + 1,
                                 rng.random() < 0.05, {"correctness": correct, "format": fmt}, correct,
                                 correct - p))  # fmt: skip
    return out


def seconds(fn: Callable[[], object]) -> Callable[[], float]:
    """A side: seconds of one call of `fn`."""

    def run() -> float:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    return run


def rate(fn: Callable[[], object], items: int) -> Callable[[], float]:
    """A side: `items` per second of one call of `fn`."""
    timed = seconds(fn)
    return lambda: items / timed()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=100_000, help="stored rollouts to read and diagnose")
    parser.add_argument("--rounds", "--repeats", type=int, default=5,
                        help="rounds of each series; the median round counts (--repeats: its old name)")
    args = parser.parse_args()
    spec = HarnessSpec()
    candidate = spec.with_field("rewards.weights.format", 0.2)
    with tempfile.TemporaryDirectory() as tmp, LoadWatch() as load:
        artifacts = open_store(tmp)
        sha = artifacts.put_bytes(to_jsonl(synthetic(args.rollouts)))
        # The last round's records and results, for the figures printed below (one round's
        # worth: every round's 100k records kept would only fill memory).
        last: dict[str, Any] = {}

        def read_and_diagnose() -> None:
            records = read_evidence(sha, artifacts)
            last["records"], last["diagnosis"] = records, diagnose(diagnosis_input(records, spec), spec)

        reads = paired_rounds({"read artifact": seconds(lambda: read_evidence(sha, artifacts)),
                               "read + diagnose": seconds(read_and_diagnose)}, args.rounds)  # fmt: skip
        records: list[RolloutRecord] = last["records"]
        rates = paired_rounds({
            "re-score": rate(lambda: rescore(records, candidate.rewards.weights), len(records)),
            "reward backtest": rate(lambda: last.update(figures=reward_backtest(records, spec, candidate)),
                                    len(records)),
        }, args.rounds)  # fmt: skip
    d: Diagnosis = last["diagnosis"]
    figures: Figures = last["figures"]
    print(f"rollouts {args.rollouts}; {args.rounds} paired rounds, sides in rotating order; seconds,"
          " median (lowest-highest):")  # fmt: skip
    print(f"  read artifact                              {spread(reads['read artifact'], 3)}")
    print(f"  read + diagnose                            {spread(reads['read + diagnose'], 3)}"
          f"   ({len(d.findings)} findings, conditions: {', '.join(c.name for c in d.conditions) or 'none'})")
    report_ratio("  read + diagnose / read artifact", ratios(reads["read + diagnose"], reads["read artifact"]), 3.0,
                 at_least=False, unit="x")  # fmt: skip
    millions = {name: [r / 1e6 for r in values] for name, values in rates.items()}
    print(f"{args.rounds} rounds, in rotating order; million rollouts/s, median (lowest-highest), no target:")
    print(f"  re-score                                   {spread(millions['re-score'])}")
    print(f"  reward backtest                            {spread(millions['reward backtest'])}"
          f"   ({figures['dead_groups_rescued']} of {figures['dead_groups_before']} dead groups rescued)")
    print(load.line())


if __name__ == "__main__":
    main()
