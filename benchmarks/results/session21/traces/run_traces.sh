#!/usr/bin/env bash
# Traces 1-4, nanoflow, balanced step fill, all four orders, after loose caps and the empty-pool head:
# 100K at seed 2, then 400K at seed 0 (two processes, one per core). 100K seed 0: ../after/.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
R=benchmarks/results/session21/traces
run() {  # requests seed workloads tag
  PYTHONPATH=. .venv/bin/python benchmarks/sim_traces.py --requests $1 --seed $2 --workloads $3 \
    --overlap nanoflow --step-fill balanced --json $R/traces_$4.json > $R/traces_$4.md 2>&1
}
run 100000 2 trace1,trace2 100k_seed2_a &
run 100000 2 trace3,trace4 100k_seed2_b &
wait
run 400000 0 trace1,trace2 400k_a &
run 400000 0 trace3,trace4 400k_b &
wait
