#!/bin/bash
# Usage: /tmp/exp/freeze.sh benchmarks/results/session14/run_file.sh NAME RUNS
# The service once on paper_files' NAME (if not yet run: its plan and outputs), then the CPU engine alone
# on that run's requests in plan, DFS and FCFS order, RUNS times each, interleaved, every step recorded.
set -e
cd "$(dirname "$0")/../../.."
R=${R:-benchmarks/results/session14}   # where the runs go (session 16 set R=benchmarks/results/session16)
PY=/work/main/.venv/bin/python
export PYTHONPATH=. HF_HUB_OFFLINE=1
name=$1; runs=$2
if ! grep -qs "\"file\": \"$name\"" $R/service_runs.jsonl; then
  $PY -m benchmarks.paper_files --files "$name" --run --json $R/service_runs.jsonl
fi
db=$(grep "\"file\": \"$name\"" $R/service_runs.jsonl | tail -1 | $PY -c "import json,sys; print(json.loads(sys.stdin.read())['db'])")
$PY -m benchmarks.engine_orders "$db" --runs "$runs" --orders plan dfs fcfs --json $R/engine_orders.jsonl --steps $R/steps.jsonl
benchmarks/results/session14/analyse.sh || true
