"""One short chaos round in CI (tests/fleet/chaos.py; `make chaos` runs more): the loop,
its controller, a worker in the middle of a training task and the dispatcher SIGKILLed
and restarted, the controller's connections terminated, and the lineage still the one an
uninterrupted run records."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fleet.chaos import _stable, chaos_round, differences, reference_lineage


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
    # How soon the killed worker's task ran again is printed, not bounded here (the other
    # worker may itself be starting up after a kill): test_crashes bounds it, workers ready.
    assert outcome.pickups_s


def test_the_comparison_leaves_out_only_what_the_clock_and_host_decide() -> None:
    assert _stable({"task_id": "train-ab-r2", "worker": "vm:1", "duration_s": 2.0,
                    "evidence": {"event_id": "x", "seq": 3, "policy_sha256": "aa"}}) == {
        "task_id": "train-ab", "evidence": {"policy_sha256": "aa"}}  # fmt: skip
    reference = {"main": [("TaskRequested", '{"task_id": "t"}'), ("EvaluationRecorded", '{"avg_at_k": 0.5}')]}
    assert differences(reference, reference) == []
    other = {"main": [reference["main"][0], ("EvaluationRecorded", '{"avg_at_k": 0.25}')]}
    assert differences(reference, other)[0].startswith("main: event 2 differs: EvaluationRecorded")
    assert "2 events in the reference, 3 here" in differences(reference, {"main": [*reference["main"],
                                                                                  reference["main"][1]]})[0]
    assert differences(reference, {**reference, "extra": []}) == ["branch extra: only in the chaos run"]
