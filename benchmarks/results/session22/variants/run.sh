#!/usr/bin/env bash
# Generate mixG/H/I into $MIX (default /tmp/mix22) and run every order on each, three engine configurations.
set -u
cd "$(dirname "$0")/../../../.."
OUT=benchmarks/results/session22/variants
MIX=${MIX:-/tmp/mix22}
mkdir -p "$MIX"
.venv/bin/python $OUT/make_variants.py --out "$MIX" 2> $OUT/make_variants.log
for m in G H I; do
  for cfg in "nanoflow budget" "sequential budget" "nanoflow balanced"; do
    set -- $cfg
    PYTHONPATH=. .venv/bin/python -m scheduler.simulator --workload-file "$MIX/mix$m.jsonl" \
      --overlap $1 --step-fill $2 --json > $OUT/mix${m}_$1_$2.json
  done
  echo "$(date +%T) done mix$m"
done
for m in G H I; do    # BlendServe without the finish (M=0) and with it (M=1)
  .venv/bin/python benchmarks/results/session22/finish/ablation.py "$MIX/mix$m.jsonl" \
    nanoflow/budget,sequential/budget,nanoflow/balanced 0 1 2>/dev/null >> $OUT/ablation.txt
done
.venv/bin/python $OUT/summarize.py > $OUT/summary.md
