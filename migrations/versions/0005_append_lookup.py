"""evotrainer_append_lookup(): an append's branch lock, head and existing keys in one call.

An append must hold its branch's advisory lock before it reads the head (see
evotrainer/store/sql.py). In one SQL statement that cannot be done: the statement's
snapshot is taken before the lock is granted, so it would miss what the lock's previous
holder committed meanwhile. A PL/pgSQL function can: each statement in it takes a fresh
snapshot (READ COMMITTED), so its reads come after the lock. One round trip instead of two.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

APPEND_LOOKUP = """
CREATE FUNCTION evotrainer_append_lookup(p_branch bigint, p_keys text[])
RETURNS TABLE (head_seq bigint, head_hash text, "position" bigint, transaction_id text, event_id text,
               experiment text, name text, seq bigint, type text, schema_version int, payload jsonb,
               causation_id text, correlation_id text, idempotency_key text, actor text,
               recorded_at timestamptz, prev_hash text, hash text)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(1702260069, (p_branch % 2147483647)::int);
    RETURN QUERY
    SELECT h.seq, h.hash, k.*
      FROM (SELECT) AS one
      LEFT JOIN LATERAL (SELECT ev.seq, ev.hash FROM events ev WHERE ev.branch_id = p_branch
                          ORDER BY ev.seq DESC LIMIT 1) AS h ON true
      LEFT JOIN LATERAL (
          SELECT e.position, e.transaction_id::text, e.event_id::text, b.experiment, b.name, e.seq, e.type,
                 e.schema_version, e.payload, e.causation_id::text, e.correlation_id::text,
                 e.idempotency_key, e.actor, e.recorded_at, e.prev_hash, e.hash
            FROM events e JOIN branches b USING (branch_id)
           WHERE e.branch_id = p_branch AND e.idempotency_key = ANY(p_keys)) AS k ON true;
END
$$
"""


def upgrade() -> None:
    op.execute(APPEND_LOOKUP)


def downgrade() -> None:
    op.execute("DROP FUNCTION evotrainer_append_lookup(bigint, text[])")
