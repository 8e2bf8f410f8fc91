"""Alembic is the only source of schema: models and revisions agree, upgrades are safe."""

from __future__ import annotations

import json
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


def test_imported_skills_the_projector_passed_are_filled_in_by_the_upgrade() -> None:
    """Migration 0012 adds projections.imported_skills to a database whose projector has
    already read SkillImported events (and would never read them again): the upgrade fills
    the table with the same rows the projector writes."""
    from alembic import command as alembic_command

    from evotrainer.lineage.projections import Projector
    from evotrainer.refs import BranchRef
    from evotrainer.store import EventStore, NewEvent

    name = create_database()
    url = url_for(name)
    skill = {"skill_id": "no_condition/grpo.learning_rate/raise", "trigger": "no condition",
             "intervention": "grpo.learning_rate x2", "expected_outcome": "avg_at_k rises",
             "category": "training_stability", "successes": 2, "failures": 1, "effect_sizes": [0.05, 0.11],
             "validated_in": ["math"], "tried_in": ["math"],
             "change": {"field": "grpo.learning_rate", "old_value": 1e-4, "new_value": 2e-4},
             "source": {"file": "skills.json", "file_sha256": "ab" * 32, "exported_from": {"experiments": ["demo"]}}}
    query = "SELECT row_to_json(t)::text FROM projections.imported_skills t ORDER BY position"
    try:
        migrate.upgrade(url)
        with EventStore.connect(url) as store:
            store.create_experiment("exp")
            store.append(BranchRef("exp", "main"), [NewEvent("SkillImported", skill)])
            Projector(store).catch_up()
            projected = store.conn.execute(query).fetchall()
        assert len(projected) == 1 and json.loads(projected[0][0])["origin"] == skill["source"]
        alembic_command.downgrade(migrate.alembic_config(url), "0011")  # the table goes, the position stays
        migrate.upgrade(url)
        with EventStore.connect(url) as store:
            assert store.conn.execute(query).fetchall() == projected
            assert Projector(store).catch_up() == 0  # nothing is projected twice
    finally:
        drop_database(name)
