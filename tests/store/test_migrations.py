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
