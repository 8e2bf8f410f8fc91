"""evotrainer_lock_branch(): a pipelined append's branch lock in a statement of its own.

A large append sends its INSERTs pipelined, without waiting for each other's results.
Each INSERT used to join the branch row to take the branch's lock (and to insert nothing
when the branch did not exist): a lookup and a lock call per statement, a tenth of the
server's time per event. Instead the append's first statement takes the lock once, for
the whole transaction, and fails when the branch row is missing (SQLSTATE EV002, as
evotrainer_fleet_close() does), which aborts the rest of the pipeline: no INSERT after it
can run, so none can write events of a branch that does not exist. It returns the
transaction id the events will carry, which the INSERTs then need not return row by row.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

LOCK_BRANCH = """
CREATE FUNCTION evotrainer_lock_branch(p_branch bigint) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM 1 FROM branches WHERE branch_id = p_branch;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'branch % does not exist', p_branch USING ERRCODE = 'EV002';
    END IF;
    PERFORM pg_advisory_xact_lock(1702260069, (p_branch % 2147483647)::int);
    RETURN pg_current_xact_id()::text;
END
$$
"""


def upgrade() -> None:
    op.execute(LOCK_BRANCH)


def downgrade() -> None:
    op.execute("DROP FUNCTION evotrainer_lock_branch(bigint)")
