"""Benchmark: diagnosing 100k stored rollouts against reading the evidence artifact alone,
and backtest re-scoring throughput.

The evidence is synthetic but shaped like a real run (groups of 8, 50 steps, math-style
reward components, short completions), stored in a temporary artifact store. Baseline:
fetch and verify the artifact and parse it into RolloutRecords (what any reader must do).
Diagnosis: the same read plus the whole default three-layer suite and the rule engine.
Target: diagnosis <= 3x the read. Medians of alternating repeats.

    .venv/bin/python bench/diagnose.py [--rollouts 100000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evotrainer.artifacts import open_store  # noqa: E402
from evotrainer.backtest import rescore, reward_backtest  # noqa: E402
from evotrainer.diagnostics import diagnose  # noqa: E402
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rollouts", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    spec = HarnessSpec()
    with tempfile.TemporaryDirectory() as tmp:
        artifacts = open_store(tmp)
        sha = artifacts.put_bytes(to_jsonl(synthetic(args.rollouts)))
        reads, diagnoses = [], []
        for _ in range(args.repeats):
            t = time.perf_counter()
            read_evidence(sha, artifacts)
            reads.append(time.perf_counter() - t)
            t = time.perf_counter()
            records = read_evidence(sha, artifacts)
            d = diagnose(diagnosis_input(records, spec), spec)
            diagnoses.append(time.perf_counter() - t)
        read_s, diag_s = statistics.median(reads), statistics.median(diagnoses)
        print(f"rollouts                {args.rollouts}")
        print(f"read artifact           {read_s:.3f} s")
        print(f"read + diagnose         {diag_s:.3f} s ({len(d.findings)} findings, "
              f"conditions: {', '.join(c.name for c in d.conditions) or 'none'})")  # fmt: skip
        print(f"ratio                   {diag_s / read_s:.2f}x (target <= 3x)")
        candidate = spec.with_field("rewards.weights.format", 0.2)
        t = time.perf_counter()
        rescore(records, candidate.rewards.weights)
        rescore_s = time.perf_counter() - t
        t = time.perf_counter()
        figures = reward_backtest(records, spec, candidate)
        backtest_s = time.perf_counter() - t
        print(f"re-score                {len(records) / rescore_s:,.0f} rollouts/s")
        print(f"reward backtest         {len(records) / backtest_s:,.0f} rollouts/s "
              f"({figures['dead_groups_rescued']} of {figures['dead_groups_before']} dead groups rescued)")  # fmt: skip


if __name__ == "__main__":
    main()
