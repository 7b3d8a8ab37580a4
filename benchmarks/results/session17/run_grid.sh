#!/usr/bin/env bash
# BlendServe only (FCFS/DFS/Balance from session 13's rows) over grid cells, one overlap mode, one variant.
# Usage: run_grid.sh VARIANT OVERLAP ROWS [CELLS]   (CELLS: RHO:S,RHO:S,...; default all 65)
cd "$(dirname "$0")/../../.."
V=$1; O=$2; ROWS=$3
CELLS=${4:-$(for r in 0.80 0.85 0.90 0.95 1.00 1.05 1.10 1.15 1.20 1.25 1.30 1.35 1.40; do for s in 0.05 0.15 0.25 0.35 0.45; do printf "%s:%s," $r $s; done; done)}
for c in ${CELLS//,/ }; do
  grep -q "\"grid-r${c%%:*}-s${c##*:}\"" "$ROWS" 2>/dev/null && continue
  nice -n 19 env PYTHONPATH=. .venv/bin/python benchmarks/results/session17/variant.py grid "$V" \
    --requests 100000 --step-tokens 2048 --overlap "$O" --cells "$c" --rows "$ROWS" \
    --baselines benchmarks/results/session13/main_guard_grid_$O.jsonl > /dev/null 2>> "${ROWS%.jsonl}.log"
done
