"""Tampering done as a superuser with the immutability triggers disabled is named by audit."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import orjson
import pytest

from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, NewEvent
from evotrainer.store.audit import audit

MAIN = BranchRef("exp", "main")


def build_history(store: EventStore) -> None:
    store.create_experiment("exp")
    store.append(MAIN, [NewEvent("TaskRequested", {"task_id": f"t{i}", "kind": "noop", "queue": "q"}) for i in range(5)])
    store.fork(BranchRef("exp", "main", 4), "alt")
    store.append(BranchRef("exp", "alt"), [NewEvent("TaskRequested", {"task_id": "a", "kind": "noop", "queue": "q"})])


def tamper(store: EventStore, *statements: str) -> None:
    with store.transaction() as conn:
        conn.execute("SET LOCAL session_replication_role = replica")  # triggers off
        for statement in statements:
            conn.execute(statement)


MAIN_ID = "(SELECT branch_id FROM branches WHERE name = 'main')"
ALT_ID = "(SELECT branch_id FROM branches WHERE name = 'alt')"
TAMPERING: dict[str, tuple[list[str], str, int]] = {
    "edit a payload": (
        [f"UPDATE events SET payload = jsonb_set(payload, '{{task_id}}', '\"evil\"') WHERE branch_id = {MAIN_ID} AND seq = 3"],
        "exp/main", 3,
    ),
    "edit the actor": ([f"UPDATE events SET actor = 'mallory' WHERE branch_id = {MAIN_ID} AND seq = 2"], "exp/main", 2),
    "delete an event": ([f"DELETE FROM events WHERE branch_id = {MAIN_ID} AND seq = 4"], "exp/main", 4),
    "insert an event": (
        [
            f"UPDATE events SET seq = seq + 100 WHERE branch_id = {MAIN_ID} AND seq >= 3",
            f"UPDATE events SET seq = seq - 99 WHERE branch_id = {MAIN_ID} AND seq >= 103",
            f"INSERT INTO events (event_id, branch_id, seq, type, schema_version, payload, actor, recorded_at,"
            f" prev_hash, hash) SELECT gen_random_uuid(), branch_id, 3, type, schema_version, payload, actor,"
            f" recorded_at, prev_hash, hash FROM events WHERE branch_id = {MAIN_ID} AND seq = 2",
        ],
        "exp/main", 3,
    ),
    "swap two events": (
        [
            f"UPDATE events SET seq = 1000 WHERE branch_id = {MAIN_ID} AND seq = 2",
            f"UPDATE events SET seq = 2 WHERE branch_id = {MAIN_ID} AND seq = 3",
            f"UPDATE events SET seq = 3 WHERE branch_id = {MAIN_ID} AND seq = 1000",
        ],
        "exp/main", 2,
    ),
    "insert an event into no branch": (
        [
            "INSERT INTO events (event_id, branch_id, seq, type, schema_version, payload, actor, recorded_at,"
            " prev_hash, hash) SELECT gen_random_uuid(), 999, seq, type, schema_version, payload, actor,"
            f" recorded_at, prev_hash, hash FROM events WHERE branch_id = {MAIN_ID} AND seq = 2",
        ],
        "(no branch 999)", 2,
    ),
    "re-parent a fork": (
        [f"UPDATE branches SET fork_seq = 3 WHERE branch_id = {ALT_ID}"],
        "exp/alt", 4,
    ),
    "edit a fork's own event": (
        [f"UPDATE events SET payload = jsonb_set(payload, '{{task_id}}', '\"b\"') WHERE branch_id = {ALT_ID} AND seq = 6"],
        "exp/alt", 6,
    ),
}


def test_an_untouched_store_is_intact(store: EventStore) -> None:
    build_history(store)
    report = audit(store)
    assert report.intact and report.branches == 2 and report.events == 8


@pytest.mark.parametrize("case", sorted(TAMPERING))
def test_tampering_is_named(store: EventStore, case: str) -> None:
    build_history(store)
    statements, branch, seq = TAMPERING[case]
    tamper(store, *statements)
    report = audit(store)
    assert not report.intact
    assert (report.problems[0].branch, report.problems[0].seq) == (branch, seq), report.problems


def test_auditing_a_fork_checks_its_ancestors(store: EventStore) -> None:
    build_history(store)
    tamper(store, f"UPDATE events SET actor = 'mallory' WHERE branch_id = {MAIN_ID} AND seq = 2")
    report = audit(store, BranchRef("exp", "alt"))
    assert not report.intact and str(report.problems[0]) == "exp/main@2: contents do not match the recorded hash (altered)"


def test_truncating_a_head_is_caught_by_anchors(store: EventStore) -> None:
    build_history(store)
    heads = audit(store).heads
    tamper(store, f"DELETE FROM events WHERE branch_id = {ALT_ID} AND seq = 6")
    assert audit(store).intact  # a shorter chain is still a valid chain ...
    from evotrainer.store.audit import verify_anchors

    problems = verify_anchors(store, heads)  # ... but not the one we anchored
    assert [(p.branch, p.seq) for p in problems] == [("exp/alt", 6)]


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([".venv/bin/evotrainer", *args], env=env, capture_output=True, text=True, check=False)


def test_cli_audit_exit_codes(store: EventStore, cli_env: dict[str, str], tmp_path) -> None:
    build_history(store)
    ok = run_cli(cli_env, "audit", "--json")
    assert ok.returncode == 0 and orjson.loads(ok.stdout)["intact"] is True
    anchors = tmp_path / "anchors.json"
    anchors.write_text(ok.stdout)
    tamper(store, f"DELETE FROM events WHERE branch_id = {MAIN_ID} AND seq = 6")
    bad = run_cli(cli_env, "audit", "--anchors", str(anchors))
    assert bad.returncode == 1
    assert bad.stdout.startswith("ALTERED: first bad event exp/main@6")
    assert run_cli(cli_env, "audit", "no-slash").returncode == 2


def test_edit_then_restore_is_intact_again(store: EventStore) -> None:
    """Audit judges contents, not history of access: restoring the exact bytes heals it."""
    build_history(store)
    original = store.conn.execute(f"SELECT payload FROM events WHERE branch_id = {MAIN_ID} AND seq = 3").fetchone()[0]
    tamper(store, f"UPDATE events SET payload = '{{}}' WHERE branch_id = {MAIN_ID} AND seq = 3")
    assert not audit(store).intact
    restore: Callable[[], None] = lambda: tamper(  # noqa: E731
        store,
        f"UPDATE events SET payload = '{orjson.dumps(original).decode()}' WHERE branch_id = {MAIN_ID} AND seq = 3",
    )
    restore()
    assert audit(store).intact
