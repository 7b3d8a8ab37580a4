#!/usr/bin/env bash
# One before/after pair at $RANKS paced ranks (64), $REQ requests each (200,000) (run under freeze.sh); $1 = after-first to swap.
REQ=${REQ:-200000}; RANKS=${RANKS:-64}
OUT=/work/main/benchmarks/results/session16/control_plane_session16.jsonl
run() { cd $1 && env HF_HUB_OFFLINE=1 PYTHONPATH=. /work/main/.venv/bin/python benchmarks/control_plane.py --requests $REQ --ranks $RANKS --label "$2" --out $OUT; }
if [ "$1" = after-first ]; then
  run /work/wt/after "after $(git -C /work/wt/after rev-parse --short HEAD)"; run /work/wt/before "before $(git -C /work/wt/before rev-parse --short HEAD)"
else
  run /work/wt/before "before $(git -C /work/wt/before rev-parse --short HEAD)"; run /work/wt/after "after $(git -C /work/wt/after rev-parse --short HEAD)"
fi
