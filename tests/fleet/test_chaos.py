"""One short chaos round in CI (tests/fleet/chaos.py; `make chaos` runs more): the loop,
its controller, a worker in the middle of a training task and the dispatcher SIGKILLed
and restarted, the controller's connections terminated, and the lineage still the one an
uninterrupted run records."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fleet.chaos import chaos_round, reference_lineage


@pytest.mark.slow
def test_a_loop_killed_at_random_records_the_lineage_of_an_uninterrupted_run(tmp_path: Path) -> None:
    # One candidate (make chaos runs two): the short version.
    reference, _ = reference_lineage(tmp_path, tmp_path / "artifacts", "evotest_chaos", iterations=1)
    assert sum(t == "TrainingCompleted" for events in reference.values() for t, _ in events) == 1
    lines: list[str] = []
    outcome = chaos_round(1, "redis", reference, tmp_path, tmp_path / "artifacts", "evotest_chaos", say=lines.append,
                          iterations=1)  # fmt: skip
    print("\n".join(lines + outcome.kills))
    assert outcome.matched, "\n".join(outcome.problems)
    killed = " ".join(outcome.kills)
    for what in ("controller (pid", "dispatcher (pid", "worker (pid", "controller connections terminated"):
        assert what in killed, outcome.kills
    assert "0 controller connections" not in killed
    # How soon the killed worker's task ran again is printed, not bounded here (the other
    # worker may itself be starting up after a kill): test_crashes bounds it, workers ready.
    assert outcome.pickups_s
