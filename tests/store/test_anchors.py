"""Signed anchors against a superuser who edits an event and re-hashes the rest of its
branch: the chain alone then audits intact; the first signed anchor after the edit does
not. Keys live outside the database (EVOTRAINER_HOME), one per test here."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from evotrainer.errors import UsageError
from evotrainer.refs import BranchRef
from evotrainer.store import EventStore, NewEvent
from evotrainer.store.anchors import (
    anchor_experiment,
    key_path,
    public_hex,
    signing_key,
    stored_anchors,
    trusted_keys,
    verify_signed_anchors,
)
from evotrainer.store.audit import audit
from evotrainer.store.encoding import canonical_json, event_hash, format_time
from tests.store.test_audit import tamper
from tests.test_cli import run

MAIN = BranchRef("signed", "main")
MAIN_ID = "(SELECT branch_id FROM branches WHERE experiment = 'signed' AND name = 'main')"


@pytest.fixture(autouse=True)
def own_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVOTRAINER_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("EVOTRAINER_ANCHOR_KEY", raising=False)


def build(store: EventStore, n: int = 6) -> None:
    store.create_experiment("signed")
    store.append(MAIN, [NewEvent("TaskRequested", {"task_id": f"t{i}", "kind": "noop", "queue": "q"}) for i in range(n)])


def edit_and_rehash(store: EventStore, seq: int) -> None:
    """What a superuser can do: change an event's payload, then recompute the hash of it
    and of every later event of the branch, so that the chain is valid again."""
    tamper(store, f"UPDATE events SET payload = jsonb_set(payload, '{{task_id}}', '\"evil\"') "
                  f"WHERE branch_id = {MAIN_ID} AND seq = {seq}")  # fmt: skip
    rows = store.conn.execute(
        "SELECT seq, event_id::text, type, schema_version, payload::text, causation_id::text, correlation_id::text,"
        f" idempotency_key, actor, recorded_at, prev_hash FROM events WHERE branch_id = {MAIN_ID} AND seq >= %s"
        " ORDER BY seq", (seq,)).fetchall()  # fmt: skip
    import orjson

    prev = rows[0][10]
    updates = []
    for s, event_id, type_, version, payload, causation, correlation, key, actor, recorded_at, _ in rows:
        new = event_hash(prev_hash=prev, event_id=event_id, experiment="signed", branch="main", seq=s,
                         event_type=type_, schema_version=version, payload_json=canonical_json(orjson.loads(payload)),
                         causation_id=causation, correlation_id=correlation, idempotency_key=key, actor=actor,
                         recorded_at=format_time(recorded_at))  # fmt: skip
        updates.append(f"UPDATE events SET prev_hash = '{prev}', hash = '{new}' WHERE branch_id = {MAIN_ID} AND seq = {s}")
        prev = new
    tamper(store, *updates)


def test_a_rehashed_edit_passes_the_chain_and_is_caught_by_the_first_anchor_after_it(store: EventStore) -> None:
    build(store)
    early = anchor_experiment(store, "signed")  # head at seq 7 (ExperimentCreated + 6)
    store.append(MAIN, [NewEvent("TaskRequested", {"task_id": "late", "kind": "noop", "queue": "q"})])
    edit_and_rehash(store, 3)
    assert audit(store).intact  # the hole: a re-hashed chain is a valid chain
    problems = verify_signed_anchors(store, stored_anchors(store, "signed"), trusted_keys())
    assert [(p.branch, p.seq) for p in problems] == [("signed/main", early[0].seq)]
    assert "history rewritten" in problems[0].problem


def test_an_edit_after_the_last_anchor_is_not_covered(store: EventStore) -> None:
    build(store)
    anchor_experiment(store, "signed")
    store.append(MAIN, [NewEvent("TaskRequested", {"task_id": f"late{i}", "kind": "noop", "queue": "q"}) for i in range(2)])
    edit_and_rehash(store, 9)  # after the anchored head (seq 7): what anchors do not protect
    assert not verify_signed_anchors(store, stored_anchors(store, "signed"), trusted_keys())


def test_an_anchor_signed_by_another_key_is_a_finding_and_an_altered_record_is_not_signed(
    store: EventStore, tmp_path: Path
) -> None:
    build(store)
    other = signing_key(tmp_path / "thief.pem")
    anchor_experiment(store, "signed", key=other)
    problems = verify_signed_anchors(store, stored_anchors(store, "signed"), trusted_keys())
    assert problems and "untrusted key" in problems[0].problem
    trust = tmp_path / "trusted.txt"
    trust.write_text(public_hex(other) + "\n")
    assert not verify_signed_anchors(store, stored_anchors(store, "signed"), trusted_keys([trust]))
    tamper(store, f"UPDATE events SET actor = 'mallory' WHERE branch_id = {MAIN_ID} AND seq = 2")
    with pytest.raises(UsageError, match="refusing to sign"):
        anchor_experiment(store, "signed")


def test_the_key_is_created_once_private_to_its_owner(store: EventStore) -> None:
    key = signing_key()
    assert stat.S_IMODE(os.stat(key_path()).st_mode) == 0o600
    assert public_hex(signing_key()) == public_hex(key)


def test_cli_anchor_then_audit_catches_the_rehash(store: EventStore, cli_env: dict[str, str], tmp_path: Path) -> None:
    build(store)
    out = tmp_path / "anchors.json"
    signed = run(cli_env, "anchor", "signed", "--out", str(out))
    assert signed.returncode == 0 and signed.stdout.startswith("signed 1 branch heads"), signed.stderr
    assert out.exists()
    assert run(cli_env, "audit").stdout.startswith("intact: 1 branches, 7 events verified, 1 signed anchors hold")
    edit_and_rehash(store, 2)
    caught = run(cli_env, "audit")
    assert caught.returncode == 1
    assert caught.stdout.startswith("ALTERED: first bad event signed/main@7: signed anchor's event")
    assert run(cli_env, "anchor", "nothing-here").returncode == 2
    subprocess.run(["true"], check=True)
