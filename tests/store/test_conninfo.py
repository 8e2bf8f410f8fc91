"""The connection string of an open store (evotrainer.store.conninfo)."""

from __future__ import annotations

import psycopg

from evotrainer.store import EventStore
from evotrainer.store.conninfo import conninfo_of


def test_conninfo_of_reads_the_connection_once_and_names_an_application_only_when_asked(store: EventStore) -> None:
    plain = conninfo_of(store)
    assert conninfo_of(store) is plain  # read once per connection (a worker asks every attempt)
    named = conninfo_of(store, application_name="probe")
    assert "application_name=probe" in named and "probe" not in plain
    with psycopg.connect(named, autocommit=True) as conn:
        assert conn.execute("SELECT current_setting('application_name')").fetchone() == ("probe",)
    with EventStore.connect(plain, actor="second") as other:
        assert conninfo_of(other) == plain and conninfo_of(other) is not plain  # a cache per connection

