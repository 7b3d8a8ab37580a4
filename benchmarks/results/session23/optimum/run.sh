#!/usr/bin/env bash
# Traces 1-4 at 100K, every order (FCFS, DFS both directions, Balance, BlendServe), three engine configurations,
# scored against T* with sharing discounting prompt tokens only (session 23). Orders and simulated seconds are
# those of session 22's code: only the optimum's denominator changed.
set -u
cd "$(dirname "$0")/../../../.."
OUT=benchmarks/results/session23/optimum
for cfg in "nanoflow budget" "sequential budget" "nanoflow balanced"; do
  set -- $cfg
  for t in 1 2 3 4; do
    PYTHONPATH=. .venv/bin/python -m scheduler.simulator --workload trace$t --requests 100000 \
      --overlap $1 --step-fill $2 --json > $OUT/trace${t}_$1_$2.json
  done
  echo "$(date +%T) done $cfg"
done
