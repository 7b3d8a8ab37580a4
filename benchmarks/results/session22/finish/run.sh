#!/usr/bin/env bash
# BlendServe alone with short_finish (session 22) on the six blind mixes and traces 1-4 at 100K, three engine
# configurations. The baselines do not depend on the planner: their rows are those of session21/blind_sim*/
# (mixes) and session21/after/ (traces). MIX: where the regenerated mix files are (blind_sim*/run_all.sh or
# make_workloads.py --out MIX); default the blind folders themselves.
set -u
cd "$(dirname "$0")/../../../.."
OUT=benchmarks/results/session22/finish
S21=benchmarks/results/session21
for cfg in "nanoflow budget" "sequential budget" "nanoflow balanced"; do
  set -- $cfg
  for m in A B C D E F; do
    if [ -n "${MIX:-}" ]; then F=$MIX/mix$m.jsonl
    elif [[ $m < D ]]; then F=$S21/blind_sim/mix$m.jsonl; else F=$S21/blind_sim2/mix$m.jsonl; fi
    PYTHONPATH=. .venv/bin/python -m scheduler.simulator --workload-file "$F" \
      --overlap $1 --step-fill $2 --policies blendserve --json > $OUT/mix${m}_$1_$2.json
  done
  for t in 1 2 3 4; do
    PYTHONPATH=. .venv/bin/python -m scheduler.simulator --workload trace$t --requests 100000 \
      --overlap $1 --step-fill $2 --policies blendserve --json > $OUT/trace${t}_$1_$2.json
  done
  echo "$(date +%T) done $cfg"
done
