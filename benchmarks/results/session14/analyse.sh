#!/bin/bash
# Usage: /tmp/exp/freeze.sh benchmarks/results/session14/analyse.sh   (about half a minute)
# The simulator against every engine run measured so far, three ways, and the simulator change's quick tests.
cd "$(dirname "$0")/../../.."
R=benchmarks/results/session14
PY=/work/main/.venv/bin/python
export PYTHONPATH=. HF_HUB_OFFLINE=1
for fit in others all; do
  $PY -m benchmarks.sim_vs_engine --runs $R/engine_orders.jsonl --steps $R/steps.jsonl --fit $fit > $R/sim_vs_engine_$fit.jsonl
done
$PY -m benchmarks.sim_vs_engine --runs $R/engine_orders.jsonl --steps $R/steps.jsonl --fit all --overlap nanoflow > $R/sim_vs_engine_all_nanoflow.jsonl 2>&1
$PY -m pytest -q tests/simulator/test_overheads.py tests/simulator/test_sim_vs_engine.py tests/planner/test_perf.py > $R/tests_quick.log 2>&1
