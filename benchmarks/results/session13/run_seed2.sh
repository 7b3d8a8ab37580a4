#!/bin/bash
# An unseen seed (2) on traces 4 and 1 (grid-r0.90-s0.05, grid-r1.40-s0.35), nanoflow, all four policies,
# after the grid runs ($@: their pids) are done.
cd "$(dirname "$0")/../../.."
for p in "$@"; do while kill -0 $p 2>/dev/null; do sleep 5; done; done
OUT=benchmarks/results/session13
PYTHONPATH=. nice -n 19 /work/main/.venv/bin/python benchmarks/sim_grid.py --requests 100000 --step-tokens 2048 \
  --overlap nanoflow --seed 2 --cells 0.90:0.05,1.40:0.35 --rows $OUT/seed2_100k_2048_nanoflow.jsonl > /dev/null 2>> $OUT/seed2.log
echo done >> $OUT/seed2.log
