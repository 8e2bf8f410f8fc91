-- Which diagnostics blocked a promotion? Rejected candidates with the findings that
-- blocked them and the conditions diagnosed on the candidate branch.
SELECT p.candidate, p.candidate_score, p.baseline_score, p.blocking_findings, p.diagnoses, p.reason
  FROM promotion_audit p
 WHERE p.decision = 'rejected'
 ORDER BY p.position
