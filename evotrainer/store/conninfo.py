"""The connection string of an open store, to open more connections to the same database."""

from __future__ import annotations

import weakref
from typing import Any

import psycopg

# A connection's parameters never change, and a fleet worker reads them for every attempt
# (to record its outcome on a new connection should this one die): parsing them each time
# cost about a fifth of a no-op task's client CPU.
_CONNINFO: weakref.WeakKeyDictionary[psycopg.Connection[Any], str] = weakref.WeakKeyDictionary()


def conninfo_of(store: Any, application_name: str | None = None) -> str:
    """The connection string of a store's connection, password included (unlike
    `conn.info.dsn`)."""
    conn = store.conn
    found = _CONNINFO.get(conn)
    if found is None:
        options = {o.keyword.decode(): o.val.decode() for o in conn.pgconn.info if o.val is not None}
        found = _CONNINFO[conn] = psycopg.conninfo.make_conninfo(**options)
    if application_name:
        return psycopg.conninfo.make_conninfo(found, application_name=application_name)
    return found
