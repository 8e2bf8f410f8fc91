"""fleet_tasks.progress: the running task's newest progress line, written by its heartbeat.

`evotrainer status` shows it next to the running task (a training run's step, reward and
ETA; an evaluation's problems done), from any process.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("fleet_tasks", sa.Column("progress", sa.Text, nullable=True))


def downgrade() -> None:
    op.drop_column("fleet_tasks", "progress")
