"""Signed anchors: branch heads signed with a key that lives outside the database.

The hash chain shows any edit of an event, unless whoever edits also recomputes the
hashes of the rest of the branch (a superuser can). A signed anchor closes that: it holds
a head's (seq, hash) signed with an Ed25519 key the database never sees, so a re-hashed
branch no longer matches the anchored hash, and forging a new anchor needs the key.
Rows are immutable like events (the same triggers); `evotrainer anchor` writes them.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

GRANTS = """
DO $$
BEGIN
    GRANT SELECT, INSERT ON anchors TO evotrainer_writer;
    GRANT SELECT ON anchors TO evotrainer_reader;
EXCEPTION WHEN undefined_object OR insufficient_privilege THEN
    RAISE NOTICE 'anchors grants skipped: %', SQLERRM;
END
$$
"""


def upgrade() -> None:
    op.create_table(
        "anchors",
        sa.Column("experiment", sa.Text, nullable=False),
        sa.Column("branch", sa.Text, nullable=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("event_hash", sa.Text, nullable=False),
        sa.Column("public_key", sa.Text, nullable=False),
        sa.Column("signature", sa.Text, nullable=False),
        sa.Column("signed_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("experiment", "branch", "seq", "public_key", name="pk_anchors"),
    )
    op.execute(
        "CREATE TRIGGER anchors_immutable_rows BEFORE UPDATE OR DELETE ON anchors"
        " FOR EACH ROW EXECUTE FUNCTION evotrainer_refuse_change()"
    )
    op.execute(
        "CREATE TRIGGER anchors_no_truncate BEFORE TRUNCATE ON anchors"
        " FOR EACH STATEMENT EXECUTE FUNCTION evotrainer_refuse_change()"
    )
    op.execute(GRANTS)


def downgrade() -> None:
    op.drop_table("anchors")
