#!/bin/bash
# The old tail guard (main before this session, a copy of its tree in $BEFORE) on the rows session 12 did not
# run (rho 1.00-1.35), BlendServe only, baselines from this session's rows; after the pids in $@ finish.
# MODES: the overlap modes to run (default both, in turn).
BEFORE=${BEFORE:-/tmp/before}
HERE=$(cd "$(dirname "$0")/../../.." && pwd)
for p in "$@"; do while kill -0 $p 2>/dev/null; do sleep 5; done; done
OUT=$HERE/benchmarks/results/session13
cd $BEFORE
for o in ${MODES:-nanoflow sequential}; do
  for rho in 1.00 1.20 1.10 1.30 1.05 1.25 1.15 1.35; do
    for s in 0.05 0.15 0.25 0.35 0.45; do
      name=$(printf 'grid-r%.2f-s%.2f' $rho $s)
      grep -q "\"$name\"" $OUT/before_new_rows_$o.jsonl 2>/dev/null && continue
      PYTHONPATH=. nice -n 19 /work/main/.venv/bin/python benchmarks/sim_grid.py --requests 100000 --step-tokens 2048 \
        --overlap $o --cells $rho:$s --rows $OUT/before_new_rows_$o.jsonl --baselines $OUT/grid_100k_2048_$o.jsonl \
        > /dev/null 2>> $OUT/before_new_rows.log
    done
  done
done
echo done >> $OUT/before_new_rows.log
