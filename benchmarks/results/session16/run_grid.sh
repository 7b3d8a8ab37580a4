#!/usr/bin/env bash
# BlendServe only (FCFS/DFS/Balance from session 13's rows) over a list of cells, one overlap mode, one variant.
# Usage: run_grid.sh VARIANT OVERLAP ROWS CELLS   (CELLS: RHO:S,RHO:S,...)
cd "$(dirname "$0")/../../.."
V=$1; O=$2; ROWS=$3; CELLS=$4
for c in ${CELLS//,/ }; do
  nice -n 19 env PYTHONPATH=. /work/main/.venv/bin/python benchmarks/results/session16/grid_variant.py "$V" \
    --requests 100000 --step-tokens 2048 --overlap "$O" --cells "$c" --rows "$ROWS" \
    --baselines benchmarks/results/session13/main_guard_grid_$O.jsonl > /dev/null 2>> "${ROWS%.jsonl}.log"
done
