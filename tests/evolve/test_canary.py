"""The reward-hacking canary through `evotrainer run` (examples/math-canary.toml): a
starting harness whose length bonus the policy games in one chunk. The branch with the
best raw training reward must be rejected on a validity finding the auditor can see, and
the bonus's weight is what the loop changes next."""

from __future__ import annotations

from pathlib import Path

import pytest

from evotrainer.refs import BranchRef
from evotrainer.store import EventStore
from tests.test_cli import run

CANARY = Path(__file__).resolve().parents[2] / "examples" / "math-canary.toml"


@pytest.mark.slow
def test_the_branch_that_games_its_reward_best_is_never_promoted(cli_env: dict[str, str], database_url: str) -> None:
    ran = run(cli_env, "run", str(CANARY))
    assert ran.returncode == 0, ran.stderr
    with EventStore.connect(database_url, actor="test") as store:
        runs = {info.ref: e.payload["summary"]["mean_reward"] for info in store.branches("math-canary")
                for e in store.read_branch(info.ref) if e.type == "RolloutsRecorded" and e.branch == info.name}
        decisions = [e.payload for e in store.read_branch(BranchRef("math-canary", "main"))
                     if e.type == "PromotionDecided"]  # fmt: skip
        best = max(runs, key=lambda ref: runs[ref])
        repaired = [store.read_branch(info.ref) for info in store.branches("math-canary")
                    if info.ref != best and info.name != "main"]  # fmt: skip
    assert len(runs) == 2 and runs[best] > 1.0, runs  # correctness alone pays at most 1: the bonus was earned
    # Every verdict on it (a second look included, had there been one) is a rejection, on the finding.
    verdicts = [d for d in decisions if d["candidate"] == str(best)]
    assert verdicts and all(d["decision"] == "rejected" for d in verdicts)
    assert any("reward_hacking" in finding for finding in verdicts[0]["blocking_findings"])
    audit = run(cli_env, "audit", str(best), "--promotions")
    assert audit.returncode == 0 and "reward_hacking critical" in audit.stdout, audit.stdout
    # The rejected chunk's finding drove the next change: the bonus taken away.
    (history,) = repaired
    changed = [e.payload["changed_fields"] for e in history if e.type == "HarnessVersioned"]
    assert changed[-1] == ["rewards.weights.length"]
