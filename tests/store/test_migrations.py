"""Alembic is the only source of schema: models and revisions agree, upgrades are safe."""

from __future__ import annotations

import subprocess
import sys

from alembic import command

from evotrainer.store import migrate
from tests.conftest import create_database, drop_database, url_for


def test_alembic_check_finds_nothing_to_generate(database_url: str) -> None:
    command.check(migrate.alembic_config(database_url))


def test_head_revision_constant_matches_the_scripts() -> None:
    assert migrate.head_of_scripts() == migrate.head_revision()


def test_concurrent_first_use_migrates_exactly_once() -> None:
    """Several processes finding an empty database at once: one migrates, none fails."""
    name = create_database()
    url = url_for(name)
    code = f"from evotrainer.store import migrate; migrate.upgrade({url!r})"
    try:
        procs = [subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE) for _ in range(3)]
        results = [(proc.wait(timeout=120), proc.stderr.read()) for proc in procs]  # type: ignore[union-attr]
        assert [rc for rc, _ in results] == [0, 0, 0], results
        assert migrate.current_revision(url) == migrate.head_revision()
    finally:
        drop_database(name)


def test_keyed_appends_survive_the_upgrade_to_on_conflict_and_back() -> None:
    """A database written before migration 0009 upgrades in place: a key taken then still
    returns its original after the upgrade, and after a downgrade to 0008."""
    from alembic import command as alembic_command

    from evotrainer.refs import BranchRef
    from evotrainer.store import EventStore, NewEvent

    name = create_database()
    url = url_for(name)
    main = BranchRef("exp", "main")

    def keyed(n: int) -> NewEvent:
        return NewEvent("TaskRequested", {"task_id": f"t{n}", "kind": "noop", "queue": "control"},
                        idempotency_key=f"k{n}")

    try:
        migrate.upgrade(url, "0008")
        with EventStore.connect(url) as store:
            store.create_experiment("exp")
            before = store.append(main, [keyed(1)])[0]
        migrate.upgrade(url)
        with EventStore.connect(url) as store:
            assert store.append(main, [keyed(1), keyed(2)])[0] == before
        alembic_command.downgrade(migrate.alembic_config(url), "0008")
        with EventStore.connect(url) as store:
            again = store.append(main, [keyed(1), keyed(2), keyed(3)])
            assert again[0] == before and [e.seq for e in again[1:]] == [3, 4]
    finally:
        drop_database(name)
