"""Which database evotrainer talks to, and making sure its schema is current.

`EVOTRAINER_DATABASE_URL` wins; otherwise the embedded server under EVOTRAINER_HOME is
started on demand. Either way the schema is brought to the newest Alembic revision on
first use in a process, so a new user never has to run `db upgrade` by hand.
"""

from __future__ import annotations

from evotrainer import config
from evotrainer.store import migrate

_ready: set[str] = set()


def database_url() -> str:
    """The configured URL, or the embedded server's (starting it if needed)."""
    override = config.database_url_override()
    if override:
        return override
    from evotrainer.store.embedded import EmbeddedPostgres

    return EmbeddedPostgres().ensure_running()


def ensure_database() -> str:
    """The database URL, with the schema migrated to head (checked once per process)."""
    url = database_url()
    if url not in _ready:
        if migrate.current_revision(url) != migrate.head_revision():
            migrate.upgrade(url)
        _ready.add(url)
    return url
