"""Appends in one statement: evotrainer_append() and evotrainer_fleet_close().

A small append used to take two round trips under its branch's lock (the lock with the
head and existing keys, then the INSERT), plus BEGIN and COMMIT around them, because
each event's hash needs the hash of the event before it. evotrainer_append() does the
whole append on the server, chaining the hashes itself: the client sends each event's
canonical hashed bytes in two pieces, everything before the seq and everything after
it (see evotrainer/store/encoding.py), and the function fills in the two values only
known under the lock, the previous hash and the seq. So the hashed bytes are the
client's own, built by the one canonical encoder; the server only concatenates.

A single statement in autocommit is a transaction of its own, so a small append is one
round trip, and its branch lock is held only while the server works and commits, never
while a message crosses the network. evotrainer_fleet_close() closes a fleet task and
appends its outcome the same way: a task's completion is one round trip.

Each returned row says what became of one event (`outcome`, `idx` its place in the
batch): 'existing' (its idempotency key was already in the branch: the original event's
columns follow), 'inserted' (position, transaction id, seq, hashes follow; the client
already has the rest), 'conflict' (the branch head in `seq` is not the expected one;
nothing was written) or 'gone' (no such branch: a branch the client cached from a
transaction that rolled back; nothing was written).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

# What became of one event of an append; see above.
APPENDED_TYPE = """
CREATE TYPE evotrainer_appended AS (
    outcome text, idx int, "position" bigint, transaction_id text, event_id text, experiment text,
    name text, seq bigint, type text, schema_version int, payload jsonb, causation_id text,
    correlation_id text, idempotency_key text, actor text, recorded_at timestamptz, prev_hash text,
    hash text)
"""

# p_events: a JSON array of {idx, event_id, type, schema_version, causation_id,
# correlation_id, idempotency_key, actor, before, after}, in order; `after` ends with a
# newline and the canonical payload, which is also what is stored.
APPEND = r"""
CREATE FUNCTION evotrainer_append(p_branch bigint, p_fork_seq bigint, p_fork_hash text,
                                  p_expected_seq bigint, p_recorded_at timestamptz, p_events jsonb)
RETURNS SETOF evotrainer_appended
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_head_seq bigint;
    v_head_hash text;
    v_checked boolean := false;
    e record;
    res evotrainer_appended;
BEGIN
    -- The branch row first: no lock is taken for a branch that does not exist.
    PERFORM 1 FROM branches WHERE branch_id = p_branch;
    IF NOT FOUND THEN
        res.outcome := 'gone';
        RETURN NEXT res;
        RETURN;
    END IF;
    -- Each statement below takes a fresh snapshot, so it sees everything the lock's
    -- previous holder committed.
    PERFORM pg_advisory_xact_lock(1702260069, (p_branch % 2147483647)::int);
    SELECT ev.seq, ev.hash INTO v_head_seq, v_head_hash
      FROM events ev WHERE ev.branch_id = p_branch ORDER BY ev.seq DESC LIMIT 1;
    IF NOT FOUND THEN
        v_head_seq := p_fork_seq;
        v_head_hash := p_fork_hash;
    END IF;
    FOR e IN SELECT * FROM jsonb_to_recordset(p_events) AS r(
                 idx int, event_id uuid, type text, schema_version int, causation_id uuid, correlation_id uuid,
                 idempotency_key text, actor text, before text, after text)
             ORDER BY r.idx
    LOOP
        IF e.idempotency_key IS NOT NULL THEN
            RETURN QUERY
            SELECT 'existing'::text, e.idx, k.position, k.transaction_id::text, k.event_id::text, b.experiment,
                   b.name, k.seq, k.type, k.schema_version, k.payload, k.causation_id::text,
                   k.correlation_id::text, k.idempotency_key, k.actor, k.recorded_at, k.prev_hash, k.hash
              FROM events k JOIN branches b USING (branch_id)
             WHERE k.branch_id = p_branch AND k.idempotency_key = e.idempotency_key;
            CONTINUE WHEN FOUND;
        END IF;
        -- The first event to be written settles the concurrency check; nothing has been
        -- written yet when it fails.
        IF NOT v_checked AND p_expected_seq IS NOT NULL AND v_head_seq <> p_expected_seq THEN
            res.outcome := 'conflict';
            res.seq := v_head_seq;
            RETURN NEXT res;
            RETURN;
        END IF;
        v_checked := true;
        res.outcome := 'inserted';
        res.idx := e.idx;
        res.seq := v_head_seq + 1;
        res.prev_hash := v_head_hash;
        res.hash := encode(sha256(convert_to(
            '["' || v_head_hash || '",' || e.before || res.seq::text || e.after, 'UTF8')), 'hex');
        INSERT INTO events (event_id, branch_id, seq, type, schema_version, payload, causation_id, correlation_id,
                            idempotency_key, actor, recorded_at, prev_hash, hash)
        VALUES (e.event_id, p_branch, res.seq, e.type, e.schema_version,
                substr(e.after, strpos(e.after, E'\n') + 1)::jsonb, e.causation_id, e.correlation_id,
                e.idempotency_key, e.actor, p_recorded_at, res.prev_hash, res.hash)
        RETURNING events.position, events.transaction_id::text INTO res.position, res.transaction_id;
        RETURN NEXT res;
        v_head_seq := res.seq;
        v_head_hash := res.hash;
    END LOOP;
END
$$
"""

# Close a fleet task (its row and its attempt) and append its events, the last of which is
# its outcome. No rows: the task was already closed, nothing written. If the outcome's key
# was already in the branch (an outcome appended by other means), the whole statement is
# undone with SQLSTATE EV001, and so is a close whose branch is gone (EV002).
FLEET_CLOSE = """
CREATE FUNCTION evotrainer_fleet_close(p_task uuid, p_attempt int, p_state text, p_error text,
                                       p_branch bigint, p_fork_seq bigint, p_fork_hash text,
                                       p_recorded_at timestamptz, p_events jsonb)
RETURNS SETOF evotrainer_appended
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_outcome int := jsonb_array_length(p_events) - 1;
    r evotrainer_appended;
BEGIN
    UPDATE fleet_tasks SET state = p_state, finished_at = now(), lease_expires_at = NULL, last_error = p_error
     WHERE event_id = p_task AND state IN ('pending', 'published', 'running');
    IF NOT FOUND THEN
        RETURN;
    END IF;
    UPDATE fleet_attempts SET outcome = p_state, ended_at = now(), error = p_error
     WHERE event_id = p_task AND attempt = p_attempt AND outcome = 'running';
    FOR r IN SELECT * FROM evotrainer_append(p_branch, p_fork_seq, p_fork_hash, NULL, p_recorded_at, p_events)
    LOOP
        IF r.outcome = 'gone' THEN
            RAISE EXCEPTION 'branch % does not exist', p_branch USING ERRCODE = 'EV002';
        END IF;
        IF r.outcome = 'existing' AND r.idx = v_outcome THEN
            RAISE EXCEPTION 'task % already has an outcome', p_task USING ERRCODE = 'EV001';
        END IF;
        RETURN NEXT r;
    END LOOP;
END
$$
"""


def upgrade() -> None:
    op.execute(APPENDED_TYPE)
    op.execute(APPEND)
    op.execute(FLEET_CLOSE)


def downgrade() -> None:
    op.execute("DROP FUNCTION evotrainer_fleet_close(uuid, int, text, text, bigint, bigint, text, timestamptz, jsonb)")
    op.execute("DROP FUNCTION evotrainer_append(bigint, bigint, text, bigint, timestamptz, jsonb)")
    op.execute("DROP TYPE evotrainer_appended")
