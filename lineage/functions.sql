-- Lineage functions over the immutable branches/events tables. Applied by migrations
-- (CREATE OR REPLACE, so a later revision can re-apply this file).

-- The ancestor chain of 'EXPERIMENT/BRANCH', nearest first. Each ancestor contributes the
-- events in (fork_seq, upto_seq]: upto_seq is the smallest fork point below it, because
-- a branch inherits only what every branch between it and the ancestor inherited.
CREATE OR REPLACE FUNCTION branch_ancestry(ref text)
RETURNS TABLE (depth int, experiment text, branch text, parent text, fork_seq bigint, upto_seq bigint,
               branch_id bigint)
LANGUAGE sql STABLE AS $$
    WITH RECURSIVE chain AS (
        SELECT 0 AS depth, b.branch_id, b.experiment, b.name, b.parent_id, b.fork_seq, NULL::bigint AS upto
          FROM branches b
         WHERE b.experiment = split_part(ref, '/', 1) AND b.name = split_part(ref, '/', 2)
        UNION ALL
        SELECT c.depth + 1, p.branch_id, p.experiment, p.name, p.parent_id, p.fork_seq,
               least(c.upto, c.fork_seq)
          FROM chain c JOIN branches p ON p.branch_id = c.parent_id
    )
    SELECT c.depth, c.experiment, c.name, pb.experiment || '/' || pb.name, c.fork_seq, c.upto, c.branch_id
      FROM chain c LEFT JOIN branches pb ON pb.branch_id = c.parent_id
     ORDER BY c.depth
$$;

-- The effective history of a branch: its inherited prefix, then its own events.
CREATE OR REPLACE FUNCTION branch_history(ref text)
RETURNS TABLE (seq bigint, experiment text, branch text, "position" bigint, event_id uuid, type text,
               schema_version int, payload jsonb, causation_id uuid, correlation_id uuid,
               idempotency_key text, actor text, recorded_at timestamptz, prev_hash text, hash text)
LANGUAGE sql STABLE AS $$
    SELECT e.seq, a.experiment, a.branch, e.position, e.event_id, e.type, e.schema_version, e.payload,
           e.causation_id, e.correlation_id, e.idempotency_key, e.actor, e.recorded_at, e.prev_hash, e.hash
      FROM branch_ancestry(ref) a
      JOIN events e ON e.branch_id = a.branch_id AND e.seq > a.fork_seq
                   AND (a.upto_seq IS NULL OR e.seq <= a.upto_seq)
     ORDER BY e.seq
$$;
