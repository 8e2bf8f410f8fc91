"""Benchmark: what the controller and the store cost over a whole `evotrainer compare`,
against the training, evaluation and diagnosis they orchestrate, in the same run.

It runs `compare` on examples/math-tiny.toml (one seed by default, in-process fleet, a
scratch database and a scratch artifact store, so the tiny policy's warm start is built
inside the first task and counted as work), takes the wall time of the whole call, and
the time the tasks themselves ran (TaskCompleted.duration_s, as the fleet measures each
attempt). Overhead = (wall - task time) / task time: reading the log, deciding, appending,
dispatching. Target: <= 0.05.

    .venv/bin/python bench/compare.py [--seeds 1] [--budget-steps 160]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.common import scratch_database  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "math-tiny.toml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--budget-steps", type=int, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="evobench-home-") as home, scratch_database() as url:
        os.environ["EVOTRAINER_HOME"] = home
        os.environ.pop("EVOTRAINER_ARTIFACTS", None)
        os.environ.pop("EVOTRAINER_BROKER_URL", None)
        from evotrainer.evolve.compare import compare
        from evotrainer.evolve.experiment_config import ExperimentConfig
        from evotrainer.store import EventStore
        from evotrainer.training.progress import quiet_libraries

        quiet_libraries()  # the figures below are the output; library bars and warnings go to a log
        config = ExperimentConfig.load(EXAMPLE)
        with EventStore.connect(url, actor="bench") as store:
            started = time.perf_counter()
            compare(store, config, args.seeds, args.budget_steps)
            wall = time.perf_counter() - started
            by_kind: dict[str, float] = defaultdict(float)
            for info in store.branches():
                history = store.read_branch(info.ref)
                kinds = {e.payload["task_id"]: e.payload["kind"] for e in history if e.type == "TaskRequested"}
                own = [e for e in history if (e.experiment, e.branch) == (info.experiment, info.name)]
                for event in own:
                    if event.type == "TaskCompleted":
                        by_kind[kinds.get(event.payload["task_id"], "?")] += float(event.payload["duration_s"])
    work = sum(by_kind.values())
    shown = ", ".join(f"{kind} {seconds:.1f} s" for kind, seconds in sorted(by_kind.items()))
    print(f"compare of {EXAMPLE.name}, {args.seeds} seed(s): wall {wall:.1f} s, tasks {work:.1f} s ({shown})")
    ratio = (wall - work) / work
    print(f"overhead (controller + store) / orchestrated work: {ratio:.3f} (target <= 0.05)")


if __name__ == "__main__":
    main()
