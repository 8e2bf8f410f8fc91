"""Fleet rows updated in place: a task's row changes state four times, cheaply.

A fleet_tasks row is updated as it is published, claimed and closed (and its lease
renewed). Postgres can update a row in place, without touching any index ("HOT"), only
when no indexed column changes and the row's page has room for the new version:

- The open-task index was on `state`, which every step changes, so every step added an
  entry to all three indexes. It becomes an index on `requested_at` (never changes) of
  rows whose `finished_at` is unset (set once, by the close): the dispatcher reads open
  tasks in request order anyway, and the reaper scans only open tasks.
- Both tables leave room on each page (fillfactor) for the versions a row goes through.
- fleet_attempts loses its foreign key to fleet_tasks: Postgres checked it with a query
  and a row lock on every claim, and the only statements that insert attempts do so for
  a task row they have just updated or locked (fleet_tasks rows are never deleted).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

OPEN_TASKS_INDEX_WHERE = "finished_at IS NULL"


def upgrade() -> None:
    op.drop_index("ix_fleet_tasks_state_open", table_name="fleet_tasks")
    op.create_index("ix_fleet_tasks_open_requested_at", "fleet_tasks", ["requested_at"],
                    postgresql_where=sa.text(OPEN_TASKS_INDEX_WHERE))
    op.drop_constraint("fk_fleet_attempts_event_id_fleet_tasks", "fleet_attempts", type_="foreignkey")
    # What the index's predicate stands for, kept true by the database.
    op.create_check_constraint("ck_fleet_tasks_finished_when_closed", "fleet_tasks",
                               "(finished_at IS NULL) = (state IN ('pending', 'published', 'running'))")
    # Applies to pages written from now on; existing pages keep their layout.
    op.execute("ALTER TABLE fleet_tasks SET (fillfactor = 50)")
    op.execute("ALTER TABLE fleet_attempts SET (fillfactor = 70)")


def downgrade() -> None:
    op.execute("ALTER TABLE fleet_attempts RESET (fillfactor)")
    op.execute("ALTER TABLE fleet_tasks RESET (fillfactor)")
    op.drop_constraint("ck_fleet_tasks_finished_when_closed", "fleet_tasks", type_="check")
    op.create_foreign_key("fk_fleet_attempts_event_id_fleet_tasks", "fleet_attempts", "fleet_tasks",
                          ["event_id"], ["event_id"])
    op.drop_index("ix_fleet_tasks_open_requested_at", table_name="fleet_tasks")
    op.create_index("ix_fleet_tasks_state_open", "fleet_tasks", ["state"],
                    postgresql_where=sa.text("state IN ('pending', 'published', 'running')"))
