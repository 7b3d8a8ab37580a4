#!/usr/bin/env bash
# Traces 1-4, nanoflow, balanced fill, with the tail measured against the compute clock (plan._tail_steps):
# 100K and 400K, seeds 0 and 2, two processes.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
R=benchmarks/results/session20/compute_tail
FILL=${FILL:-balanced}; OVERLAP=${OVERLAP:-nanoflow}
run() {  # requests seed tag
  PYTHONPATH=. nice -n 5 .venv/bin/python benchmarks/sim_traces.py --requests $1 --seed $2 --overlap $OVERLAP \
    --step-fill $FILL --json $R/traces_${OVERLAP}_${FILL}_$3.json > $R/traces_${OVERLAP}_${FILL}_$3.md 2>&1
}
run 100000 0 100k_seed0 & run 100000 2 100k_seed2 & wait
run 400000 0 400k_seed0 & run 400000 2 400k_seed2 & wait
