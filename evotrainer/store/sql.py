"""SQL text shared by the store's reader and writer paths, kept in one place."""

EVENT_COLUMNS = """
    e.position, e.transaction_id::text, e.event_id::text, b.experiment, b.name, e.seq, e.type,
    e.schema_version, e.payload, e.causation_id::text, e.correlation_id::text,
    e.idempotency_key, e.actor, e.recorded_at, e.prev_hash, e.hash
"""

SELECT_EVENTS = f"SELECT {EVENT_COLUMNS} FROM events e JOIN branches b USING (branch_id)"

# The ancestor chain of a branch, nearest first: what its effective history is made of.
ANCESTRY = """
WITH RECURSIVE chain AS (
    SELECT branch_id, experiment, name, parent_id, fork_seq, 0 AS depth
      FROM branches WHERE experiment = %s AND name = %s
    UNION ALL
    SELECT b.branch_id, b.experiment, b.name, b.parent_id, b.fork_seq, c.depth + 1
      FROM branches b JOIN chain c ON b.branch_id = c.parent_id
)
SELECT branch_id, experiment, name, parent_id, fork_seq FROM chain ORDER BY depth
"""

HEAD = "SELECT seq, hash FROM events WHERE branch_id = %s ORDER BY seq DESC LIMIT 1"

EXISTING_KEYS = SELECT_EVENTS + " WHERE e.branch_id = %s AND e.idempotency_key = ANY(%s)"

# One statement per batch: arrays in, rows out. Cheaper than a round trip per row and,
# unlike COPY, it returns the positions and transaction id the rows were given.
INSERT_BATCH = """
INSERT INTO events (event_id, branch_id, seq, type, schema_version, payload, causation_id,
                    correlation_id, idempotency_key, actor, recorded_at, prev_hash, hash)
SELECT * FROM unnest(%s::uuid[], %s::bigint[], %s::bigint[], %s::text[], %s::int[], %s::jsonb[],
                     %s::uuid[], %s::uuid[], %s::text[], %s::text[], %s::timestamptz[],
                     %s::text[], %s::text[])
RETURNING seq, position, transaction_id::text
"""

# Readers following the global order. Positions come from a sequence, so a transaction
# can commit a lower position after a reader has already passed a higher one. Instead of
# a global write lock (which would serialise every writer), readers order by the writing
# transaction's id and only look at transactions older than the oldest one still running
# (the snapshot's xmin): such a transaction has finished, so no event can ever appear
# before the reader's cursor. A long-open transaction anywhere in the cluster therefore
# delays readers, never misleads them.
READ_AFTER = (
    SELECT_EVENTS
    + """
 WHERE (e.transaction_id, e.position) > (%s::text::xid8, %s)
   AND e.transaction_id < pg_snapshot_xmin(pg_current_snapshot())
 ORDER BY e.transaction_id, e.position
 LIMIT %s
"""
)
