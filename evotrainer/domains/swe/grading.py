"""Grading a final repository state, as SWE-bench grades a prediction.

For a SWE-bench instance: start from the clean tree at base_commit, take the agent's
changes to non-test source files only (test files and test infrastructure come back
from base, see testinfra.py), apply test_patch, run FAIL_TO_PASS and PASS_TO_PASS by
node id in the sandbox and read each test's status from the log (testrun.py).

Reward components:
- correctness: 1 only when every FAIL_TO_PASS and PASS_TO_PASS test passes;
- partial_tests: the share of FAIL_TO_PASS tests that pass times the share of
  PASS_TO_PASS tests that still pass (breaking what worked costs as much as fixing
  gains), for a harness that wants a denser signal;
- visible_tests: every PASS_TO_PASS test passes (nothing that worked was broken).
A generated problem has no node ids: its hidden tests run through the built-in runner
and partial_tests is the share of them that pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from evotrainer.domains.swe.gitops import PatchError, apply_diff
from evotrainer.domains.swe.instances import SweInstance
from evotrainer.domains.swe.testinfra import restore_protected
from evotrainer.domains.swe.testrun import DEFAULT_TEST_CMD, RunSetup, TestRun, command_with_ids, run_tests
from evotrainer.errors import UsageError


@dataclass(frozen=True)
class Grade:
    rewards: dict[str, float]
    statuses: dict[str, str]
    """node id -> status for every FAIL_TO_PASS and PASS_TO_PASS test (MISSING: not in the log)."""
    log: str = ""


def graded_tree(files: Mapping[str, str], base: Mapping[str, str], instance: SweInstance) -> dict[str, str]:
    """The agent's source changes on base, tests and test infrastructure as at base, plus test_patch."""
    tree = restore_protected(files, base)
    try:
        return apply_diff(tree, instance.test_patch)
    except PatchError as exc:
        # test_patch applied at base (checked at load) and touches test files, which
        # are restored: it can only fail if the instance itself is broken.
        raise UsageError(f"instance {instance.instance_id} cannot be graded: test_patch does not apply: {exc}") from exc


def instance_command(instance: SweInstance, default_cmd: str) -> str:
    ids = (*instance.fail_to_pass, *instance.pass_to_pass)
    return command_with_ids(instance.test_cmd or default_cmd or DEFAULT_TEST_CMD, ids)


# Base checks already run in this process: the tree at base is fixed per instance, and a
# policy that keeps breaking imports (or hanging) would otherwise pay for one each time.
_BASE_CHECKS: dict[tuple[SweInstance, str, Path | None], list[str]] = {}


def uncollected_at_base(base: Mapping[str, str], instance: SweInstance, default_cmd: str, setup: RunSetup) -> list[str]:
    """FAIL_TO_PASS/PASS_TO_PASS ids that have no status at base with test_patch applied."""
    command = instance_command(instance, default_cmd)
    key = (instance, command, setup.packages)
    if key not in _BASE_CHECKS:
        run = run_tests(graded_tree(base, base, instance), command, setup)
        _BASE_CHECKS[key] = [i for i in (*instance.fail_to_pass, *instance.pass_to_pass) if i not in run.statuses]
    return _BASE_CHECKS[key]


def grade_instance(
    files: Mapping[str, str],
    base: Mapping[str, str],
    instance: SweInstance,
    default_cmd: str,
    setup: RunSetup,
) -> Grade:
    command = instance_command(instance, default_cmd)
    run: TestRun = run_tests(graded_tree(files, base, instance), command, setup)
    ids = (*instance.fail_to_pass, *instance.pass_to_pass)
    if any(i not in run.statuses for i in ids):
        # A test with no status either was never collected (the agent broke an import:
        # it fails) or cannot be collected at all (the instance is broken: refuse it).
        missing = uncollected_at_base(base, instance, default_cmd, setup)
        if missing:
            raise UsageError(f"instance {instance.instance_id} cannot be graded: tests not collected at "
                             f"base_commit: {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}")  # fmt: skip
    statuses = {i: run.statuses.get(i, "MISSING") for i in ids}
    f2p = [run.passed(i) for i in instance.fail_to_pass]
    p2p = [run.passed(i) for i in instance.pass_to_pass]
    p2p_share = sum(p2p) / len(p2p) if p2p else 1.0
    return Grade(
        rewards={
            "correctness": float(all(f2p) and all(p2p)),
            "partial_tests": sum(f2p) / len(f2p) * p2p_share,
            "visible_tests": float(all(p2p)),
        },
        statuses=statuses,
        log=run.log,
    )
