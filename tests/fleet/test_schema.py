"""The fleet's tables: the revision and the SQLModel description agree."""

from __future__ import annotations

from alembic import command

import evotrainer.fleet.tables  # noqa: F401  (adds the fleet's tables to the metadata)
from evotrainer.store import migrate


def test_alembic_check_with_the_fleet_tables(database_url: str) -> None:
    command.check(migrate.alembic_config(database_url))


def test_downgrade_and_upgrade_again(database_url: str) -> None:
    from alembic import command as cmd

    cfg = migrate.alembic_config(database_url)
    cmd.downgrade(cfg, "0001")
    cmd.upgrade(cfg, "head")
    command.check(cfg)
