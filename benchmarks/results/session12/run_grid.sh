#!/bin/bash
# The rest of the grid in a spread rho order, so that a run stopped at the deadline covers the whole rho range;
# both overlap modes per cell; cells that already have a row are skipped.
cd /work/wt/plan
OUT=benchmarks/results/session12
while kill -0 22754 2>/dev/null; do sleep 2; done
for rho in 0.95 1.40 1.20 1.05 1.30 1.10 1.35 1.15 1.25 1.00; do
  for s in 0.05 0.15 0.25 0.35 0.45; do
    for o in nanoflow sequential; do
      name=$(printf 'grid-r%.2f-s%.2f' $rho $s)
      grep -q "\"$name\"" $OUT/grid_100k_2048_$o.jsonl 2>/dev/null && continue
      PYTHONPATH=. nice -n 19 /work/main/.venv/bin/python benchmarks/sim_grid.py --requests 100000 --step-tokens 2048 \
        --overlap $o --cells $rho:$s --rows $OUT/grid_100k_2048_$o.jsonl > /dev/null 2>> $OUT/grid_100k_2048.log
    done
  done
done
echo done >> $OUT/grid_100k_2048.log
