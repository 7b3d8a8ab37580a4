#!/bin/bash
# Nanoflow, BlendServe only (baselines from this session's rows), on rows of the compute-heavy half: the old
# guard (main's tree at /tmp/before) and the "tail first" variant (the pool-paced guard with every tail key at
# -1: the long-bound requests lead the order, the engine's in-order admission paces them; tree at /tmp/tailfirst).
HERE=$(cd "$(dirname "$0")/../../.." && pwd)
OUT=$HERE/benchmarks/results/session13
for rho in 1.35 1.25 1.05 1.15 1.00 1.10 1.20 1.30; do
  for s in 0.05 0.15 0.25 0.35 0.45; do
    for v in before tailfirst; do
      name=$(printf 'grid-r%.2f-s%.2f' $rho $s)
      rows=$OUT/${v}_new_rows_nanoflow.jsonl
      [ $v = tailfirst ] && rows=$OUT/variant_tail_first_nanoflow.jsonl
      grep -q "\"$name\"" $rows 2>/dev/null && continue
      (cd /tmp/$v && PYTHONPATH=. nice -n 19 /work/main/.venv/bin/python benchmarks/sim_grid.py --requests 100000 \
        --step-tokens 2048 --overlap nanoflow --cells $rho:$s --rows $rows \
        --baselines $OUT/grid_100k_2048_nanoflow.jsonl > /dev/null 2>> $OUT/variants.log)
    done
  done
done
echo done >> $OUT/variants.log
