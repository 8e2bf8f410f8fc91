-- How is the fleet doing? Tasks by kind and status, with attempts.
SELECT kind, status, count(*) AS tasks, max(attempts) AS max_attempts
  FROM projections.tasks
 GROUP BY kind, status
 ORDER BY kind, status
