"""Benchmark: grading one SWE-bench instance against running its tests bare, same run.

    .venv/bin/python bench/swe_grade.py [--rounds 9] [--problem-seed 3]

The instance is a generated problem exported as a SWE-bench instance (a git repository,
base_commit, gold patch, test_patch, FAIL_TO_PASS/PASS_TO_PASS; see
evotrainer/domains/swe/export.py). Grading is `SweDomain.score` on the gold patch:
clean tree at base_commit, the patch applied with `git apply`, test infrastructure
restored, test_patch applied, the listed tests run by node id in the sandbox and their
statuses read from the log. Baseline: the same pytest command (same interpreter, same
options, same node ids) as a bare subprocess on a checkout prepared once beforehand.
Every round runs each side once, back to back, in an order that rotates from round to
round (bench/common.py), and takes the ratio bare/graded time within the round. Prints
the median round's ratio with the lowest and highest, the machine's load over the run,
and whether the median meets the target (>= 0.5).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import LoadWatch, paired_rounds, ratios, report_ratio, spread  # noqa: E402
from evotrainer.domains.swe import SweDomain, SweDomainConfig  # noqa: E402
from evotrainer.domains.swe.env import SweConfig  # noqa: E402
from evotrainer.domains.swe.export import export_instance  # noqa: E402
from evotrainer.domains.swe.gitops import apply_diff  # noqa: E402
from evotrainer.domains.swe.grading import graded_tree, instance_command  # noqa: E402
from evotrainer.domains.swe.repos import generate_problem  # noqa: E402
from evotrainer.domains.swe.testrun import DEFAULT_TEST_CMD  # noqa: E402

TARGET = 0.5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9, help="paired rounds; the median round counts")
    parser.add_argument("--problem-seed", type=int, default=3)
    args = parser.parse_args()
    config = SweConfig()
    with tempfile.TemporaryDirectory(prefix="evotrainer-bench-swe-") as tmp:
        root = Path(tmp)
        row = export_instance(generate_problem(random.Random(args.problem_seed)), "bench__bench-1", root / "repos",
                              config.sandbox)  # fmt: skip
        (root / "instances.jsonl").write_text(json.dumps(row) + "\n")
        domain = SweDomain(SweDomainConfig(env=config, instances=root / "instances.jsonl", repos=root / "repos"))
        (task,) = domain.all_tasks()
        problem = task.metadata["problem"]
        assert problem.instance is not None
        # The bare side's checkout: the gold fix and test_patch applied once, beforehand.
        checkout = root / "checkout"
        gold = apply_diff(problem.files, row["patch"])
        for path, text in graded_tree(gold, problem.files, problem.instance).items():
            (checkout / path).parent.mkdir(parents=True, exist_ok=True)
            (checkout / path).write_text(text)
        command = instance_command(problem.instance, DEFAULT_TEST_CMD).replace("python", sys.executable, 1)
        env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONNOUSERSITE": "1",
               "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip
        env.pop("PYTHONPATH", None)

        def bare() -> float:
            start = time.perf_counter()
            done = subprocess.run(command, shell=True, cwd=checkout, env=env, capture_output=True, text=True)
            assert " passed" in done.stdout and " failed" not in done.stdout, done.stdout[-2000:]
            return time.perf_counter() - start

        def graded() -> float:
            start = time.perf_counter()
            assert domain.score(task, row["patch"])["correctness"] == 1.0
            return time.perf_counter() - start

        bare(), graded()  # warm the page cache and the interpreter's first start
        with LoadWatch() as load:
            found = paired_rounds({"bare": bare, "graded": graded}, args.rounds)
    ms = {name: [t * 1000 for t in times] for name, times in found.items()}
    tests = len(problem.instance.fail_to_pass) + len(problem.instance.pass_to_pass)
    print(f"instance: {tests} tests by node id, {len(problem.files)} files")
    print(f"{args.rounds} paired rounds, sides in rotating order; ms, median (lowest-highest):")
    print(f"  bare pytest on a prepared checkout   {spread(ms['bare'], 1)}")
    print(f"  graded (checkout, apply, sandbox)    {spread(ms['graded'], 1)}")
    report_ratio("bare / graded (time of one grading)", ratios(found["bare"], found["graded"]), TARGET)
    print(load.line())


if __name__ == "__main__":
    main()
