"""Benchmark: what the controller and the store cost over a whole `evotrainer compare`,
against the training, evaluation and diagnosis they orchestrate, in the same run.

    .venv/bin/python bench/compare.py [--seeds 1] [--budget-steps 160] [--rounds 3]

A round runs `compare` on examples/math-tiny.toml (one seed by default, in-process fleet)
in a process of its own, with a scratch database and a scratch EVOTRAINER_HOME (artifact
store included), so nothing is reused from an earlier round: the tiny policy's warm
start is built inside the round's first task and counted as work, and every round pays
the same imports and first steps. It takes the wall time of the whole call and the time
the tasks themselves ran (TaskCompleted.duration_s, as the fleet measures each attempt).
Overhead = (wall - task time) / task time: reading the log, deciding, appending,
dispatching. There is no bare side to pair with, so the rounds are whole compares run
one after another; each round's overhead is its own ratio. Prints every round, the
median round's overhead with the lowest and highest, the machine's load over the run,
and whether the median meets the target (<= 0.05).

A round is long (one seed's compare: 86 s on a quiet 2-core machine, 173 s on a busy
one), so the default is three rounds.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.common import LoadWatch, report_ratio, scratch_database  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "math-tiny.toml"
TARGET = 0.05


class Round(NamedTuple):
    """One whole compare."""

    wall: float
    """Seconds of the compare call."""
    by_kind: dict[str, float]
    """Seconds its tasks ran, by task kind."""

    @property
    def work(self) -> float:
        return sum(self.by_kind.values())

    @property
    def overhead(self) -> float:
        return (self.wall - self.work) / self.work


def one_compare(seeds: int, budget_steps: int | None) -> Round:
    """A whole compare in a scratch database and a scratch home (run in a fresh process)."""
    with tempfile.TemporaryDirectory(prefix="evobench-home-") as home, scratch_database() as url:
        os.environ["EVOTRAINER_HOME"] = home
        os.environ.pop("EVOTRAINER_ARTIFACTS", None)
        os.environ.pop("EVOTRAINER_BROKER_URL", None)
        from evotrainer.evolve.compare import compare
        from evotrainer.evolve.experiment_config import ExperimentConfig
        from evotrainer.store import EventStore
        from evotrainer.training.progress import quiet_libraries

        quiet_libraries()  # the figures are the output; library bars and warnings go to a log
        config = ExperimentConfig.load(EXAMPLE)
        with EventStore.connect(url, actor="bench") as store:
            started = time.perf_counter()
            compare(store, config, seeds, budget_steps)
            wall = time.perf_counter() - started
            return Round(wall, task_seconds(store))


def task_seconds(store) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Seconds the tasks on every branch ran, by kind (each TaskCompleted counted on the
    branch that recorded it, not again on the branches forked from it)."""
    from evotrainer.evolve.promotion import own_events

    by_kind: dict[str, float] = defaultdict(float)
    for info in store.branches():
        history = store.read_branch(info.ref)
        kinds = {e.payload["task_id"]: e.payload["kind"] for e in history if e.type == "TaskRequested"}
        for event in own_events(history, info.ref):
            if event.type == "TaskCompleted":
                by_kind[kinds.get(event.payload["task_id"], "?")] += float(event.payload["duration_s"])
    return dict(by_kind)


def in_fresh_process(seeds: int, budget_steps: int | None) -> Round:
    """one_compare in a process started for it: no imports, caches or warmed-up torch
    carried over from an earlier round."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(one_compare, seeds, budget_steps).result()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--budget-steps", type=int, default=None, help="the file's budget_steps (160) unless given")
    parser.add_argument("--rounds", type=int, default=3, help="whole compares; the median round counts")
    args = parser.parse_args()
    found: list[Round] = []
    with LoadWatch() as load:
        for i in range(args.rounds):
            found.append(in_fresh_process(args.seeds, args.budget_steps))
            shown = ", ".join(f"{kind} {seconds:.1f} s" for kind, seconds in sorted(found[-1].by_kind.items()))
            print(f"round {i + 1}: wall {found[-1].wall:.1f} s, tasks {found[-1].work:.1f} s ({shown}),"
                  f" overhead {found[-1].overhead:.3f}", flush=True)  # fmt: skip
    budget = f"budget {args.budget_steps} steps" if args.budget_steps else "the file's budget"
    print(f"{args.rounds} rounds, each a whole compare of {EXAMPLE.name}, {args.seeds} seed(s), {budget}")
    report_ratio("overhead (controller + store) / orchestrated work", [r.overhead for r in found], TARGET,
                 at_least=False, width=50, digits=3)  # fmt: skip
    print(load.line())


if __name__ == "__main__":
    main()
