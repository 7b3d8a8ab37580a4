#!/usr/bin/env bash
# BlendServe alone (the baselines do not depend on the planner: their rows stay those of blind_sim*/ and
# session20/) on the six blind mixes and traces 1-4 at 100K, three engine configurations, current code.
set -u
cd "$(dirname "$0")/../../../.."
OUT=benchmarks/results/session21/after
for cfg in "nanoflow budget" "sequential budget" "nanoflow balanced"; do
  set -- $cfg
  for m in A B C; do
    PYTHONPATH=. .venv/bin/python -m scheduler.simulator --workload-file benchmarks/results/session21/blind_sim/mix$m.jsonl \
      --overlap $1 --step-fill $2 --policies blendserve --json > $OUT/mix${m}_$1_$2.json
  done
  for m in D E F; do
    PYTHONPATH=. .venv/bin/python -m scheduler.simulator --workload-file benchmarks/results/session21/blind_sim2/mix$m.jsonl \
      --overlap $1 --step-fill $2 --policies blendserve --json > $OUT/mix${m}_$1_$2.json
  done
  for t in 1 2 3 4; do
    PYTHONPATH=. .venv/bin/python -m scheduler.simulator --workload trace$t --requests 100000 \
      --overlap $1 --step-fill $2 --json > $OUT/trace${t}_$1_$2.json
  done
  echo "$(date +%T) done $cfg"
done
