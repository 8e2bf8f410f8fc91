"""Leaner event indexes: every index and check on `events` is paid on each appended row.

- The primary key becomes (branch_id, seq), the unique index that optimistic concurrency
  needs anyway; a separate key on `position` was a fifth index that nothing looked up.
- The readers' (transaction_id, position) index becomes unique: that pair is the global
  order's cursor, so it is what must never repeat (positions come from an identity).
- The foreign key from events to branches goes. Postgres checks it row by row with a
  query and a lock on the branch row, which cost a fifth of an append's server time.
  Branch rows can never be deleted (triggers refuse it), the store only writes to
  branches it has resolved, every reader joins branches, and `audit` names any event
  row whose branch does not exist.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_constraint("fk_events_branch_id_branches", "events", type_="foreignkey")
    op.drop_constraint("pk_events", "events", type_="primary")
    op.drop_constraint("uq_events_branch_id_seq", "events", type_="unique")
    op.create_primary_key("pk_events", "events", ["branch_id", "seq"])
    op.drop_index("ix_events_transaction_id_position", "events")
    op.create_index("uq_events_transaction_id_position", "events", ["transaction_id", "position"], unique=True)


def downgrade() -> None:
    op.drop_index("uq_events_transaction_id_position", "events")
    op.create_index("ix_events_transaction_id_position", "events", ["transaction_id", "position"])
    op.drop_constraint("pk_events", "events", type_="primary")
    op.create_unique_constraint("uq_events_branch_id_seq", "events", ["branch_id", "seq"])
    op.create_primary_key("pk_events", "events", ["position"])
    op.create_foreign_key("fk_events_branch_id_branches", "events", "branches", ["branch_id"], ["branch_id"])
