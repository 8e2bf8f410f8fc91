-- Views over the lineage, for SQL questions (`evotrainer sql`). Applied by migrations.

-- One row per fork: which branch started from which, where, chained to which hash.
CREATE OR REPLACE VIEW lineage_edges AS
SELECT c.experiment, p.name AS parent, c.name AS child, c.fork_seq,
       f.payload ->> 'fork_hash' AS fork_hash, f.payload ->> 'reason' AS reason, c.created_at
  FROM branches c
  JOIN branches p ON p.branch_id = c.parent_id
  LEFT JOIN events f ON f.branch_id = c.branch_id AND f.seq = c.fork_seq + 1;

-- Every branch's head, read from the log itself (never stale).
CREATE OR REPLACE VIEW branch_heads AS
SELECT b.experiment, b.name AS branch, coalesce(h.seq, b.fork_seq) AS head_seq, h.hash AS head_hash,
       h.type AS head_type, h.recorded_at AS head_recorded_at
  FROM branches b
  LEFT JOIN LATERAL (
      SELECT e.seq, e.hash, e.type, e.recorded_at FROM events e
       WHERE e.branch_id = b.branch_id ORDER BY e.seq DESC LIMIT 1
  ) h ON true;

-- Experiments with the domain and description they were created with.
CREATE OR REPLACE VIEW experiments AS
SELECT b.experiment, e.payload ->> 'domain' AS domain, e.payload ->> 'description' AS description,
       e.recorded_at AS created_at
  FROM branches b JOIN events e ON e.branch_id = b.branch_id AND e.seq = 1
 WHERE b.parent_id IS NULL;

-- Each promotion decision with the evidence behind it: the intervention it tested, that
-- intervention's backtests, the candidate's latest evaluation before the decision, and
-- the diagnoses recorded on the candidate branch.
CREATE OR REPLACE VIEW promotion_audit AS
SELECT p.experiment, p.branch AS decided_on, p.seq, p.position, p.candidate, p.decision,
       p.baseline_score, p.candidate_score, p.margin, p.blocking_findings, p.reason,
       p.intervention_id, i.field AS intervention_field, i.old_value, i.new_value, i.hypothesis,
       (SELECT jsonb_agg(jsonb_build_object('kind', b.kind, 'passed', b.passed, 'figures', b.figures)
                         ORDER BY b.position)
          FROM projections.backtests b
         WHERE b.experiment = p.experiment AND b.intervention_id = p.intervention_id) AS backtests,
       (SELECT jsonb_build_object('metric', e.metric, 'avg_at_k', e.avg_at_k, 'k', e.k, 'problems', e.problems,
                                  'policy_sha256', e.policy_sha256)
          FROM projections.evaluations e
         WHERE e.experiment = p.experiment AND e.branch = split_part(p.candidate, '/', 2)
           AND e.position < p.position
         ORDER BY e.position DESC LIMIT 1) AS evaluation,
       (SELECT jsonb_agg(jsonb_build_object('seq', d.seq, 'conditions', d.conditions, 'blocking', d.blocking)
                         ORDER BY d.position)
          FROM projections.diagnoses d
         WHERE d.experiment = p.experiment AND d.branch = split_part(p.candidate, '/', 2)) AS diagnoses
  FROM projections.promotions p
  LEFT JOIN LATERAL (
      SELECT * FROM projections.interventions x
       WHERE x.experiment = p.experiment AND x.intervention_id = p.intervention_id
       ORDER BY x.position LIMIT 1
  ) i ON true;
