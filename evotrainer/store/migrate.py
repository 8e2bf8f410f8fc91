"""Schema migrations through Alembic, the only place the schema is defined.

`head_revision()` finds the newest revision by reading the revision files' headers (far
cheaper than loading Alembic's script directory); a test checks it agrees with Alembic.
Comparing it with the database's revision is one query, so every command can afford it.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import psycopg

from evotrainer.errors import DatabaseUnavailableError

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"
_REVISION = re.compile(r"^revision\s*=\s*[\"']([^\"']+)[\"']", re.M)
_DOWN = re.compile(r"^down_revision\s*=\s*[\"']([^\"']+)[\"']", re.M)


@cache
def head_revision() -> str:
    """The one revision no other revision builds on."""
    revisions, parents = set(), set()
    for path in (MIGRATIONS_DIR / "versions").glob("*.py"):
        text = path.read_text(encoding="utf-8")
        if match := _REVISION.search(text):
            revisions.add(match.group(1))
        if match := _DOWN.search(text):
            parents.add(match.group(1))
    heads = revisions - parents
    if len(heads) != 1:
        raise RuntimeError(f"migrations must have exactly one head, found {sorted(heads)}")
    return heads.pop()


def sqlalchemy_url(url: str) -> str:
    """The same database as a SQLAlchemy URL using the psycopg 3 driver."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def alembic_config(url: str):  # type: ignore[no-untyped-def]
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", sqlalchemy_url(url).replace("%", "%%"))
    return cfg


def current_revision(url: str) -> str | None:
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            exists = conn.execute("SELECT to_regclass('alembic_version') IS NOT NULL").fetchone()
            if not exists or not exists[0]:
                return None
            row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
            return row[0] if row else None
    except psycopg.OperationalError as exc:
        first = (str(exc).strip().splitlines() or ["?"])[0]
        raise DatabaseUnavailableError(f"cannot connect to the event store: {first}") from None


def upgrade(url: str, revision: str = "head") -> None:
    from alembic import command

    command.upgrade(alembic_config(url), revision)


def head_of_scripts() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config("postgresql://unused")).get_current_head()
    return str(head)
