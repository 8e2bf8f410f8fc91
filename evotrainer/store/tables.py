"""The store's tables as SQLModel metadata: what Alembic's autogenerate and `check` compare.

The schema itself is created only by the revisions in migrations/; these classes describe
it so that `alembic check` can prove the two agree. Rows are read and written through
psycopg on the hot path, not through the ORM.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.types import UserDefinedType
from sqlmodel import Field, SQLModel

# Stable constraint names, so later revisions can refer to them.
SQLModel.metadata.naming_convention = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Xid8(UserDefinedType[int]):
    """Postgres's 64-bit, never-wrapping transaction id."""

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        return "xid8"


class Branch(SQLModel, table=True):
    """A line of history. A fork inherits its parent's first `fork_seq` events, shared."""

    __tablename__ = "branches"
    __table_args__ = (sa.UniqueConstraint("experiment", "name"),)

    branch_id: int | None = Field(
        default=None, sa_column=sa.Column(sa.BigInteger, sa.Identity(always=True), primary_key=True)
    )
    experiment: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    name: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    parent_id: int | None = Field(
        default=None, sa_column=sa.Column(sa.BigInteger, sa.ForeignKey("branches.branch_id"), nullable=True)
    )
    fork_seq: int = Field(default=0, sa_column=sa.Column(sa.BigInteger, nullable=False, server_default="0"))
    created_at: datetime = Field(
        sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now())
    )


class StoredEventRow(SQLModel, table=True):
    """One immutable event. `position` is global; `seq` counts within the branch's history."""

    __tablename__ = "events"
    __table_args__ = (
        sa.Index(
            "uq_events_branch_id_idempotency_key", "branch_id", "idempotency_key", unique=True,
            postgresql_where=sa.text("idempotency_key IS NOT NULL"),
        ),
        sa.Index("uq_events_transaction_id_position", "transaction_id", "position", unique=True),
        sa.CheckConstraint("seq > 0", name="seq_positive"),
    )

    position: int | None = Field(
        default=None, sa_column=sa.Column(sa.BigInteger, sa.Identity(always=True), nullable=False)
    )
    transaction_id: int | None = Field(
        default=None,
        sa_column=sa.Column(Xid8(), nullable=False, server_default=sa.text("pg_current_xact_id()")),
    )
    event_id: uuid.UUID = Field(sa_column=sa.Column(sa.Uuid, nullable=False, unique=True))
    # No foreign key to branches: see migration 0004 (audit names orphan rows instead).
    branch_id: int = Field(sa_column=sa.Column(sa.BigInteger, primary_key=True))
    seq: int = Field(sa_column=sa.Column(sa.BigInteger, primary_key=True))
    type: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    schema_version: int = Field(sa_column=sa.Column(sa.Integer, nullable=False))
    payload: dict[str, Any] = Field(sa_column=sa.Column(postgresql.JSONB, nullable=False))
    causation_id: uuid.UUID | None = Field(default=None, sa_column=sa.Column(sa.Uuid, nullable=True))
    correlation_id: uuid.UUID | None = Field(default=None, sa_column=sa.Column(sa.Uuid, nullable=True))
    idempotency_key: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))
    actor: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    recorded_at: datetime = Field(sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False))
    prev_hash: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    hash: str = Field(sa_column=sa.Column(sa.Text, nullable=False))


class SubscriptionRow(SQLModel, table=True):
    """A consumer's position in the global order, saved with the consumer's own output."""

    __tablename__ = "subscriptions"

    name: str = Field(sa_column=sa.Column(sa.Text, primary_key=True))
    transaction_id: int = Field(
        sa_column=sa.Column(Xid8(), nullable=False, server_default=sa.text("'0'::xid8"))
    )
    position: int = Field(default=0, sa_column=sa.Column(sa.BigInteger, nullable=False, server_default="0"))


class AnchorRow(SQLModel, table=True):
    """A branch head signed with a key outside the database (store/anchors.py)."""

    __tablename__ = "anchors"

    experiment: str = Field(sa_column=sa.Column(sa.Text, primary_key=True))
    branch: str = Field(sa_column=sa.Column(sa.Text, primary_key=True))
    seq: int = Field(sa_column=sa.Column(sa.BigInteger, primary_key=True))
    event_hash: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    public_key: str = Field(sa_column=sa.Column(sa.Text, primary_key=True))
    signature: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    signed_at: datetime = Field(
        sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False, server_default=sa.text("now()"))
    )


metadata = SQLModel.metadata

# Let reflection (alembic check) recognise the column type instead of warning about it.
postgresql.base.ischema_names["xid8"] = Xid8
