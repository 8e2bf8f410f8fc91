-- What did a branch change relative to its parent? The events it recorded after the fork
-- point, interventions and harness versions first. Replace 'demo/lr-down' with your branch.
SELECT h.seq, h.type,
       coalesce(h.payload ->> 'field', h.payload ->> 'harness_hash', h.payload ->> 'metric') AS what,
       coalesce(h.payload ->> 'new_value', h.payload ->> 'avg_at_k') AS value
  FROM branch_history('demo/lr-down') h
  JOIN branch_ancestry('demo/lr-down') a ON a.depth = 0 AND h.seq > a.fork_seq
 ORDER BY h.seq
