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

# In a statement's select (or RETURNING) list: its transaction commits without waiting for
# the write-ahead log to reach the disk. Only for rows whose loss in a crash of the server
# is harmless (the fleet's claims and outbox bookkeeping, a rebuildable consumer's output).
ASYNC_COMMIT = "set_config('synchronous_commit', 'off', true)"

# Every append holds its branch's lock (advisory, to the end of the transaction; the
# class number keeps it apart from other users of advisory locks, and the functions of
# migrations 0005, 0006 and 0008 take the same one) before it reads the head, or, when it
# trusts a head it cached, before its first INSERT (the lock is re-entrant).
# Two appends to one branch take turns instead of racing for a seq, so one that read the
# head never inserts, fails and starts over, and an append inside a caller's transaction
# needs no savepoint. Appends to different branches never share a lock.
BRANCH_LOCK_CLASS = 1702260069

# The branch lock, then the head and the events already holding some keys: one round
# trip (migration 0005 says why this is a function). One row whose first two columns are
# the head (NULL when the branch has no events of its own), followed by an event's
# columns (EVENT_COLUMNS) for each key found (NULL when none was); no row at all when the
# branch does not exist (a one-time filter: the function does not run).
LOCK_HEAD_AND_KEYS = (
    "SELECT * FROM evotrainer_append_lookup(%(branch)s, %(keys)s)"
    " WHERE EXISTS (SELECT 1 FROM branches WHERE branch_id = %(branch)s)"
)

# A small append in one statement: migration 0006's function takes the branch lock, reads
# the head and existing keys, chains the hashes and inserts. EventStore.append_through
# passes the keyword parameters other than expected_seq.
APPEND_CALL = (
    "SELECT * FROM evotrainer_append(%(branch)s, %(fork_seq)s, %(fork_hash)s, %(expected_seq)s,"
    " %(recorded_at)s, %(events)s)"
)
# The SQLSTATE a function that appends through evotrainer_append() raises to undo its own
# work when the branch turned out not to exist (its 'gone' row).
BRANCH_GONE_SQLSTATE = "EV002"

# The first statement of a large append (migration 0008): the branch lock for the rest
# of the transaction, failing with BRANCH_GONE_SQLSTATE (and so aborting the pipelined
# INSERTs behind it) when the branch row is missing; returns the transaction id.
LOCK_BRANCH = "SELECT evotrainer_lock_branch(%s)"

# Then one statement per chunk: the rows travel as one JSON array of arrays that the
# server unpacks, each row's values in this order: event_id, seq, type, schema_version, payload,
# causation_id, correlation_id, idempotency_key, actor, prev_hash, hash. Cheaper than a
# round trip per row, and cheaper than array parameters, whose text escaping is done row
# by row in Python; unlike COPY it returns the positions the rows were given. Arrays
# rather than objects: no column name is written and parsed again for every row, and
# picking values by index cost the server less than jsonb_to_recordset's matching by
# name (ad hoc, on rows of twelve columns: 18 against 30 us a row). (events has no
# foreign key to branches: LOCK_BRANCH checked the row.)
INSERT_ROWS = """
INSERT INTO events (event_id, branch_id, seq, type, schema_version, payload, causation_id,
                    correlation_id, idempotency_key, actor, recorded_at, prev_hash, hash)
SELECT (r->>0)::uuid, %s, (r->>1)::bigint, r->>2, (r->>3)::int, r->4, (r->>5)::uuid,
       (r->>6)::uuid, r->>7, r->>8, %s, r->>9, r->>10
  FROM jsonb_array_elements(%s::jsonb) AS a(r)
RETURNING seq, position
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
