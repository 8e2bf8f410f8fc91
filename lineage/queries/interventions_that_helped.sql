-- Which interventions helped, per domain? Every promoted candidate with the single
-- harness field its intervention changed and the margin it won by.
SELECT x.domain, p.intervention_field AS field, p.new_value, p.candidate, round(p.margin::numeric, 3) AS margin
  FROM promotion_audit p
  JOIN experiments x USING (experiment)
 WHERE p.decision = 'promoted'
 ORDER BY x.domain, p.margin DESC
