#!/bin/bash
# The "tail first" guard over the whole grid, one overlap mode per call ($1), BlendServe only, baselines from
# this session's grid rows; the planner tree at $TREE (default /tmp/tailfirst: HEAD with every tail key at -1).
HERE=$(cd "$(dirname "$0")/../../.." && pwd)
TREE=${TREE:-/tmp/tailfirst}
OUT=$HERE/benchmarks/results/session13
o=$1
rows=$OUT/tail_first_grid_$o.jsonl
for rho in 0.90 0.85 1.35 1.25 0.80 0.95 1.00 1.05 1.10 1.15 1.20 1.30 1.40; do
  for s in 0.05 0.15 0.25 0.35 0.45; do
    name=$(printf 'grid-r%.2f-s%.2f' $rho $s)
    grep -q "\"$name\"" $rows 2>/dev/null && continue
    (cd $TREE && PYTHONPATH=. nice -n 19 /work/main/.venv/bin/python benchmarks/sim_grid.py --requests 100000 \
      --step-tokens 2048 --overlap $o --cells $rho:$s --rows $rows \
      --baselines $OUT/grid_100k_2048_$o.jsonl > /dev/null 2>> $OUT/tail_first_$o.log)
  done
done
echo done >> $OUT/tail_first_$o.log
