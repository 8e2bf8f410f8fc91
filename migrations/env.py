"""Alembic environment: evotrainer's metadata, its database URL, one migrator at a time."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool, text

import evotrainer.fleet.tables  # noqa: F401  (the fleet's tables join the metadata alembic compares)
from evotrainer.store.tables import metadata

# Any number of processes may find the schema old at once (auto-upgrade on first use);
# this advisory lock, taken in the migration's own transaction, lets exactly one of them
# migrate while the others wait and then find nothing left to do.
MIGRATION_LOCK_KEY = 0x65766F74  # "evot"


def _url() -> str:
    url = context.config.get_main_option("sqlalchemy.url")
    if url:
        return url
    from evotrainer.store.database import database_url
    from evotrainer.store.migrate import sqlalchemy_url

    return sqlalchemy_url(database_url())


def run_migrations_online() -> None:
    engine = create_engine(_url(), poolclass=pool.NullPool)
    with engine.connect() as connection:
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
        context.configure(connection=connection, target_metadata=metadata, compare_type=True)
        with context.begin_transaction():
            context.run_migrations()
        connection.commit()


run_migrations_online()
