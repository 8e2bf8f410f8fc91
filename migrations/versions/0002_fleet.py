"""The worker fleet's tables: outbox hand-offs and task leases (fleet_tasks), attempts.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# Unlike events, these rows change (a hand-off is published, a lease renewed): the
# writer role may UPDATE them. Same fallback as 0001 when roles cannot be granted.
GRANTS = """
DO $$
BEGIN
    GRANT SELECT, INSERT, UPDATE ON fleet_tasks, fleet_attempts TO evotrainer_writer;
    GRANT SELECT ON fleet_tasks, fleet_attempts TO evotrainer_reader;
EXCEPTION WHEN insufficient_privilege OR undefined_object THEN
    RAISE NOTICE 'evotrainer fleet grants not made: %', SQLERRM;
END
$$
"""


def upgrade() -> None:
    op.create_table(
        "fleet_tasks",
        sa.Column("event_id", sa.Uuid, nullable=False),
        sa.Column("experiment", sa.Text, nullable=False),
        sa.Column("branch", sa.Text, nullable=False),
        sa.Column("task_id", sa.Text, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("queue", sa.Text, nullable=False),
        sa.Column("max_attempts", sa.Integer, nullable=False),
        sa.Column("state", sa.Text, server_default="pending", nullable=False),
        sa.Column("attempts", sa.Integer, server_default="0", nullable=False),
        sa.Column("worker", sa.Text, nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("publish_count", sa.Integer, server_default="0", nullable=False),
        sa.Column("requested_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.CheckConstraint(
            "state IN ('pending', 'published', 'running', 'completed', 'failed')",
            name="ck_fleet_tasks_state_known",
        ),
        sa.PrimaryKeyConstraint("event_id", name="pk_fleet_tasks"),
        sa.UniqueConstraint("experiment", "branch", "task_id", name="uq_fleet_tasks_experiment_branch_task_id"),
    )
    # The dispatcher and the reaper scan only unfinished tasks; finished ones pile up.
    op.create_index(
        "ix_fleet_tasks_state_open", "fleet_tasks", ["state"],
        postgresql_where=sa.text("state IN ('pending', 'published', 'running')"),
    )
    op.create_table(
        "fleet_attempts",
        sa.Column("event_id", sa.Uuid, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("worker", sa.Text, nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("outcome", sa.Text, server_default="running", nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.ForeignKeyConstraint(["event_id"], ["fleet_tasks.event_id"], name="fk_fleet_attempts_event_id_fleet_tasks"),
        sa.PrimaryKeyConstraint("event_id", "attempt", name="pk_fleet_attempts"),
    )
    op.execute(GRANTS)


def downgrade() -> None:
    op.drop_table("fleet_attempts")
    op.drop_index("ix_fleet_tasks_state_open", table_name="fleet_tasks")
    op.drop_table("fleet_tasks")
