"""Keyed appends check their key in the INSERT itself: no lookup before it.

evotrainer_append() looked every keyed event up (an index probe and a join to branches)
before inserting it, although nearly every key it sees is new: the fleet and the
controller key everything they append, and a key comes back only when a task is retried.
The key's unique index already answers the question as the row goes in, so the INSERT
now asks it (ON CONFLICT on that index, DO NOTHING) and the original is read only when
the index says the key is taken. Nothing else changes: the same outcomes in the same
order, the same hashes; a repeated key still returns the original whatever the payload.

The concurrency check keeps its rule (the first event to be written settles it): while
the head differs from the expected one, an event can still come back as an existing
one, so its key is looked up first, as before.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03
"""

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

# The original event for a key, as an 'existing' row (see migration 0006).
_EXISTING = """
            RETURN QUERY
            SELECT 'existing'::text, e.idx, k.position, k.transaction_id::text, k.event_id::text, b.experiment,
                   b.name, k.seq, k.type, k.schema_version, k.payload, k.causation_id::text,
                   k.correlation_id::text, k.idempotency_key, k.actor, k.recorded_at, k.prev_hash, k.hash
              FROM events k JOIN branches b USING (branch_id)
             WHERE k.branch_id = p_branch AND k.idempotency_key = e.idempotency_key;"""

_HEAD = r"""
CREATE OR REPLACE FUNCTION evotrainer_append(p_branch bigint, p_fork_seq bigint, p_fork_hash text,
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
"""

APPEND = _HEAD + r"""
        -- The first event to be written settles the concurrency check; nothing has been
        -- written yet when it fails. Until then an event whose key is taken comes back.
        IF NOT v_checked AND p_expected_seq IS NOT NULL AND v_head_seq <> p_expected_seq THEN
            IF e.idempotency_key IS NOT NULL THEN""" + _EXISTING + r"""
                CONTINUE WHEN FOUND;
            END IF;
            res.outcome := 'conflict';
            res.seq := v_head_seq;
            RETURN NEXT res;
            RETURN;
        END IF;
        res.outcome := 'inserted';
        res.idx := e.idx;
        res.seq := v_head_seq + 1;
        res.prev_hash := v_head_hash;
        res.hash := encode(sha256(convert_to(
            '["' || v_head_hash || '",' || e.before || res.seq::text || e.after, 'UTF8')), 'hex');
        -- Unkeyed rows never conflict on the key's (partial) index, so one INSERT serves
        -- both; a taken key inserts nothing, and the original comes back instead.
        INSERT INTO events (event_id, branch_id, seq, type, schema_version, payload, causation_id, correlation_id,
                            idempotency_key, actor, recorded_at, prev_hash, hash)
        VALUES (e.event_id, p_branch, res.seq, e.type, e.schema_version,
                substr(e.after, strpos(e.after, E'\n') + 1)::jsonb, e.causation_id, e.correlation_id,
                e.idempotency_key, e.actor, p_recorded_at, res.prev_hash, res.hash)
        ON CONFLICT (branch_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING events.position, events.transaction_id::text INTO res.position, res.transaction_id;
        IF NOT FOUND THEN""" + _EXISTING + r"""
            CONTINUE;
        END IF;
        v_checked := true;
        RETURN NEXT res;
        v_head_seq := res.seq;
        v_head_hash := res.hash;
    END LOOP;
END
$$
"""

# Migration 0006's body, for the way back.
APPEND_0006 = _HEAD + r"""
        IF e.idempotency_key IS NOT NULL THEN""" + _EXISTING + r"""
            CONTINUE WHEN FOUND;
        END IF;
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


def upgrade() -> None:
    op.execute(APPEND)


def downgrade() -> None:
    op.execute(APPEND_0006)
