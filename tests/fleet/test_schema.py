"""The fleet's revision can be undone and redone (alembic check itself runs in tests/store)."""

from __future__ import annotations

from alembic import command

from evotrainer.store import migrate


def test_downgrade_and_upgrade_again(database_url: str) -> None:
    cfg = migrate.alembic_config(database_url)
    command.downgrade(cfg, "0001")
    command.upgrade(cfg, "head")
    command.check(cfg)
