-- Every branch's status and scores, best first.
SELECT experiment, branch, parent, fork_seq, status, head_seq, last_score, best_score
  FROM projections.branch_state
 ORDER BY best_score DESC NULLS LAST, experiment, branch
