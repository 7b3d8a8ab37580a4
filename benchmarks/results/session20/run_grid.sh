#!/usr/bin/env bash
# The 65-cell grid, nanoflow, balanced step fill, 100K requests, seed 0: two processes (one per core),
# each appending its cells' rows to its own file as they finish.
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=benchmarks/results/session20
A=$(python3 -c "print(','.join(f'{r:.2f}:{s:.2f}' for r in (0.80,0.85,0.90,0.95,1.00,1.05,1.10) for s in (0.05,0.15,0.25,0.35,0.45)))")
B=$(python3 -c "print(','.join(f'{r:.2f}:{s:.2f}' for r in (1.15,1.20,1.25,1.30,1.35,1.40) for s in (0.05,0.15,0.25,0.35,0.45)))")
for part in A B; do
  PYTHONPATH=. nice -n 5 .venv/bin/python benchmarks/sim_grid.py --requests 100000 --step-tokens 2048 \
    --overlap nanoflow --step-fill balanced --cells "${!part}" --rows $R/grid_balanced_$part.jsonl \
    > $R/grid_balanced_$part.md 2> $R/grid_balanced_$part.log &
done
wait
