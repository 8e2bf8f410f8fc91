#!/usr/bin/env bash
# The demo behind `make demo`: train a tiny policy, propose a single-factor intervention,
# fork a branch that runs it, train, evaluate and diagnose that branch, let the promotion
# gate decide, then ask the lineage questions, re-execute the fork's recorded computations
# and audit the record.
# Uses EVOTRAINER_DATABASE_URL when set, otherwise an embedded Postgres under
# EVOTRAINER_HOME (default ~/.evotrainer), started on demand. About a minute on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
ev() { echo "\$ evotrainer $*"; .venv/bin/evotrainer "$@" 2> >(grep -v -e Warning -e warn -e '%|' >&2); echo; }
x="demo-$(date +%H%M%S)"

ev experiment create "$x" --domain math --config '{"domain": "math:digit_add"}' --description "evotrainer demo" > /dev/null
ev harness record "$x/main"
ev train "$x/main"
ev evaluate "$x/main" --k 4 --tasks 32
ev propose "$x/main" --set grpo.learning_rate=0.003 --id lr-up --criterion "avg_at_k_gain >= 0.02" \
  --hypothesis "if the learning rate triples, Avg@4 rises because 20 steps barely move a 1M-parameter policy"
ev fork "$x/main" lr-up --intervention lr-up > /dev/null
ev harness diff "$x/main" "$x/lr-up"
ev train "$x/lr-up"
ev evaluate "$x/lr-up" --k 4 --tasks 32
ev diagnose "$x/lr-up"
# The gate exits 0 for promoted and 1 for rejected: both are decisions, anything else fails.
echo "\$ evotrainer promote $x/lr-up"
status=0
.venv/bin/evotrainer promote "$x/lr-up" || status=$?
[ "$status" -le 1 ] || exit "$status"
echo
ev log "$x/lr-up"
ev lineage "$x"
ev sql "SELECT candidate, decision, intervention_field, new_value, evaluation->>'avg_at_k' AS avg_at_k, margin FROM promotion_audit WHERE experiment = '$x'"
ev sql --file lineage/queries/branch_scores.sql
ev replay "$x/lr-up"
ev replay "$x/main" --projections
ev audit --artifacts
# The same record, to look at: the read-only dashboard, and a report to share.
ev report "$x" --out "${EVOTRAINER_HOME:-$HOME/.evotrainer}/reports/$x"
echo "Open the dashboard on this experiment (loopback only, read-only):"
echo "  .venv/bin/evotrainer ui   # then http://127.0.0.1:8765/e/$x"
