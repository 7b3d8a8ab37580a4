#!/usr/bin/env bash
# Regenerate the blind workloads and rerun all 9 simulator runs, one at a time.
# Usage (from anywhere): bash benchmarks/results/session21/blind_sim/run_all.sh [--skip-gen]
set -u
cd /work/main
D=benchmarks/results/session21/blind_sim
if [ "${1:-}" != "--skip-gen" ]; then
  .venv/bin/python $D/make_workloads.py --seed 2121 | tee $D/gen_summary.txt
fi
for F in mixA mixB mixC; do
  for cfg in "nanoflow budget" "sequential budget" "nanoflow balanced"; do
    set -- $cfg; OV=$1; FILL=$2
    echo "$(date +%T) start $F $OV $FILL"
    s=$(date +%s)
    PYTHONPATH=. timeout 3000 .venv/bin/python -m scheduler.simulator \
      --workload-file $D/$F.jsonl --json --overlap $OV --step-fill $FILL \
      > $D/${F}_${OV}_${FILL}.json 2> $D/${F}_${OV}_${FILL}.log
    rc=$?
    echo "$(date +%T) done  $F $OV $FILL rc=$rc $(( $(date +%s) - s ))s"
  done
done
.venv/bin/python $D/summarize_results.py > $D/results.md
