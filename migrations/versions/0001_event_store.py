"""The event store: branches, immutable hash-chained events, subscriptions, roles.

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from evotrainer.store.tables import Xid8

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# History is refused change by the database itself, not only by the application: any
# UPDATE, DELETE or TRUNCATE of a recorded row raises, whoever asks. (A superuser can
# still disable triggers; the hash chain is what makes that visible to `audit`.)
REFUSE_CHANGE = """
CREATE FUNCTION evotrainer_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'evotrainer: % on % refused: recorded history is immutable', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END
$$
"""

# Roles are cluster-wide and need CREATEROLE; without it the store still works and the
# migration says why the roles are missing instead of failing.
ROLES = """
DO $$
BEGIN
    BEGIN
        CREATE ROLE evotrainer_writer NOLOGIN;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
    END;
    BEGIN
        CREATE ROLE evotrainer_reader NOLOGIN;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
    END;
    GRANT SELECT, INSERT ON events, branches TO evotrainer_writer;
    GRANT SELECT, INSERT, UPDATE ON subscriptions TO evotrainer_writer;
    GRANT SELECT ON events, branches, subscriptions TO evotrainer_reader;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'evotrainer roles not created: %', SQLERRM;
END
$$
"""


def upgrade() -> None:
    op.create_table(
        "branches",
        sa.Column("branch_id", sa.BigInteger, sa.Identity(always=True), nullable=False),
        sa.Column("experiment", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("parent_id", sa.BigInteger, nullable=True),
        sa.Column("fork_seq", sa.BigInteger, server_default="0", nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(["parent_id"], ["branches.branch_id"], name="fk_branches_parent_id_branches"),
        sa.PrimaryKeyConstraint("branch_id", name="pk_branches"),
        sa.UniqueConstraint("experiment", "name", name="uq_branches_experiment_name"),
    )
    op.create_table(
        "events",
        sa.Column("position", sa.BigInteger, sa.Identity(always=True), nullable=False),
        sa.Column("transaction_id", Xid8(), server_default=sa.text("pg_current_xact_id()"), nullable=False),
        sa.Column("event_id", sa.Uuid, nullable=False),
        sa.Column("branch_id", sa.BigInteger, nullable=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("type", sa.Text, nullable=False),
        sa.Column("schema_version", sa.Integer, nullable=False),
        sa.Column("payload", postgresql.JSONB, nullable=False),
        sa.Column("causation_id", sa.Uuid, nullable=True),
        sa.Column("correlation_id", sa.Uuid, nullable=True),
        sa.Column("idempotency_key", sa.Text, nullable=True),
        sa.Column("actor", sa.Text, nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("prev_hash", sa.Text, nullable=False),
        sa.Column("hash", sa.Text, nullable=False),
        sa.CheckConstraint("seq > 0", name="ck_events_seq_positive"),
        sa.ForeignKeyConstraint(["branch_id"], ["branches.branch_id"], name="fk_events_branch_id_branches"),
        sa.PrimaryKeyConstraint("position", name="pk_events"),
        sa.UniqueConstraint("branch_id", "seq", name="uq_events_branch_id_seq"),
        sa.UniqueConstraint("event_id", name="uq_events_event_id"),
    )
    op.create_index("ix_events_transaction_id_position", "events", ["transaction_id", "position"])
    # Most events carry no idempotency key: a partial index skips them entirely.
    op.create_index(
        "uq_events_branch_id_idempotency_key", "events", ["branch_id", "idempotency_key"], unique=True,
        postgresql_where=sa.text("idempotency_key IS NOT NULL"),
    )
    op.create_table(
        "subscriptions",
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("transaction_id", Xid8(), server_default=sa.text("'0'::xid8"), nullable=False),
        sa.Column("position", sa.BigInteger, server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_subscriptions"),
    )
    op.execute(REFUSE_CHANGE)
    for table in ("events", "branches"):
        op.execute(
            f"CREATE TRIGGER {table}_immutable_rows BEFORE UPDATE OR DELETE ON {table}"
            " FOR EACH ROW EXECUTE FUNCTION evotrainer_refuse_change()"
        )
        op.execute(
            f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table}"
            " FOR EACH STATEMENT EXECUTE FUNCTION evotrainer_refuse_change()"
        )
    op.execute(ROLES)


def downgrade() -> None:
    op.drop_table("subscriptions")
    op.drop_table("events")
    op.drop_table("branches")
    op.execute("DROP FUNCTION evotrainer_refuse_change()")
