#!/usr/bin/env bash
# The 65-cell grid at 100K requests, seed 0, BlendServe rerun with short_finish (session 22);
# FCFS, DFS and Balance reused from the earlier rows (no planner change touches them), three configs,
# two processes (one per core).
set -euo pipefail
cd "$(dirname "$0")/../../../.."
R=benchmarks/results/session22/grid
A=$(python3 -c "print(','.join(f'{r:.2f}:{s:.2f}' for r in (0.80,0.85,0.90,0.95,1.00,1.05,1.10) for s in (0.05,0.15,0.25,0.35,0.45)))")
B=$(python3 -c "print(','.join(f'{r:.2f}:{s:.2f}' for r in (1.15,1.20,1.25,1.30,1.35,1.40) for s in (0.05,0.15,0.25,0.35,0.45)))")
for cfg in "nanoflow budget benchmarks/results/session17/split_nanoflow.jsonl" \
           "sequential budget benchmarks/results/session17/split_sequential.jsonl" \
           "nanoflow balanced benchmarks/results/session20/grid_balanced.jsonl"; do
  set -- $cfg
  for part in A B; do
    PYTHONPATH=. .venv/bin/python benchmarks/sim_grid.py --requests 100000 --step-tokens 2048 \
      --overlap $1 --step-fill $2 --baselines $3 --cells "${!part}" --rows $R/grid_$1_$2.jsonl \
      > $R/grid_$1_$2_$part.md 2> $R/grid_$1_$2_$part.log &
  done
  wait
done
