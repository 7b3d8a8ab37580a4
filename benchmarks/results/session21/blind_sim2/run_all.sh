#!/usr/bin/env bash
# Regenerate the blind workloads and run the team's simulator on them, one run at a time.
# Usage (from anywhere): bash benchmarks/results/session21/blind_sim2/run_all.sh [--skip-gen]
set -u
D=benchmarks/results/session21/blind_sim2
cd /work/main
if [ "${1:-}" != "--skip-gen" ]; then
  PYTHONPATH=$D .venv/bin/python $D/make_workloads.py --out $D 2> $D/make_workloads.log
fi
for F in mixD mixE mixF; do
  for C in "nanoflow budget" "sequential budget" "nanoflow balanced"; do
    set -- $C; O=$1; S=$2
    echo "$(date +%T) start $F $O $S" >> $D/run_all.log
    t0=$(date +%s)
    PYTHONPATH=. timeout 3000 .venv/bin/python -m scheduler.simulator \
      --workload-file $D/$F.jsonl --json --overlap $O --step-fill $S \
      > $D/${F}_${O}_${S}.json 2> $D/${F}_${O}_${S}.log
    rc=$?
    echo "$(date +%T) done  $F $O $S rc=$rc wall=$(( $(date +%s) - t0 ))s" >> $D/run_all.log
  done
done
.venv/bin/python $D/make_results.py > $D/results.md
