#!/usr/bin/env bash
# Traces 1-4, nanoflow, balanced step fill, all four orders: 100K at seeds 0 and 2, then 400K at seed 0
# (two processes, one per core).
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=benchmarks/results/session20
run() {  # requests seed workloads tag
  PYTHONPATH=. nice -n 5 .venv/bin/python benchmarks/sim_traces.py --requests $1 --seed $2 --workloads $3 \
    --overlap nanoflow --step-fill balanced --json $R/traces_$4.json > $R/traces_$4.md 2>&1
}
run 100000 0 trace1,trace2,trace3,trace4 100k_seed0 &
run 100000 2 trace1,trace2,trace3,trace4 100k_seed2 &
wait
run 400000 0 trace1,trace2 400k_a &
run 400000 0 trace3,trace4 400k_b &
wait
