#!/bin/bash
# Session 13 grid at 100K requests, 2048-token steps, one overlap mode per call ($1): first the rows session 12
# did not run (rho 1.00-1.35, all four policies, spread rho order so a run stopped early covers the range),
# then the cells session 12 ran, BlendServe only (--baselines reuses its FCFS/DFS/Balance fractions of T*).
# Cells that already have a row in the output are skipped.
cd "$(dirname "$0")/../../.."
o=$1
OUT=benchmarks/results/session13
ROWS=$OUT/grid_100k_2048_$o.jsonl
OLD=benchmarks/results/session12/grid_100k_2048_$o.jsonl
for rho in 1.00 1.20 1.10 1.30 1.05 1.25 1.15 1.35 0.80 0.85 0.90 0.95 1.40; do
  for s in 0.05 0.15 0.25 0.35 0.45; do
    name=$(printf 'grid-r%.2f-s%.2f' $rho $s)
    grep -q "\"$name\"" $ROWS 2>/dev/null && continue
    PYTHONPATH=. nice -n 19 /work/main/.venv/bin/python benchmarks/sim_grid.py --requests 100000 --step-tokens 2048 \
      --overlap $o --cells $rho:$s --rows $ROWS --baselines $OLD > /dev/null 2>> $OUT/grid_100k_2048_$o.log
  done
done
echo done >> $OUT/grid_100k_2048_$o.log
