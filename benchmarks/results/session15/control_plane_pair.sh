#!/usr/bin/env bash
# One before/after pair at 64 paced ranks, 200,000 requests each (run under freeze.sh).
OUT=/work/wt/cp5/benchmarks/results/session15/control_plane_session15.jsonl
run() { cd $1 && env HF_HUB_OFFLINE=1 PYTHONPATH=. /work/main/.venv/bin/python benchmarks/control_plane.py --requests 200000 --ranks 64 --label "$2" --out $OUT; }
if [ "$1" = after-first ]; then
  run /work/wt/cp5-after "after 06a796f"; run /work/wt/cp5-before "before 87c04ff"
else
  run /work/wt/cp5-before "before 87c04ff"; run /work/wt/cp5-after "after 06a796f"
fi
