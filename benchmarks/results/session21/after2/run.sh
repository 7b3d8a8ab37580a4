#!/usr/bin/env bash
# BlendServe alone on the six blind mixes, three configurations, after loose-cap requests left the tail class
# outright (not by a first estimate the long samples lift); the baselines stay those of blind_sim*/.
set -u
cd "$(dirname "$0")/../../../.."
OUT=benchmarks/results/session21/after2
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
  for t in; do
    PYTHONPATH=. .venv/bin/python -m scheduler.simulator --workload trace$t --requests 100000 \
      --overlap $1 --step-fill $2 --json > $OUT/trace${t}_$1_$2.json
  done
  echo "$(date +%T) done $cfg"
done
