#!/usr/bin/env bash
# The demo behind `make demo`: an experiment's lineage, recorded, forked and audited.
# Uses EVOTRAINER_DATABASE_URL when set, otherwise an embedded Postgres under
# EVOTRAINER_HOME (default ~/.evotrainer), started on demand.
set -euo pipefail
cd "$(dirname "$0")/.."
ev() { echo "\$ evotrainer $*"; .venv/bin/evotrainer "$@"; echo; }
name="demo-$(date +%Y%m%d-%H%M%S)"

ev experiment create "$name" --domain math --description "evotrainer demo" > /dev/null
ev events append "$name/main" --type TaskRequested \
  --payload '{"task_id": "train-1", "kind": "train", "queue": "train", "inputs": {"steps": 20}}' \
  --expected-seq 1 --idempotency-key train-1
ev events append "$name/main" --type TaskRequested \
  --payload '{"task_id": "train-1", "kind": "train", "queue": "train", "inputs": {"steps": 20}}' \
  --idempotency-key train-1 > /dev/null
echo "(the same idempotency key again: nothing new was written)"
ev events append "$name/main" --type TaskRequested --payload '{"task_id": "x"}' || true
ev fork "$name/main@2" lr-lower --reason "try a lower learning rate"
ev events list "$name/lr-lower"
ev audit "$name/lr-lower"
