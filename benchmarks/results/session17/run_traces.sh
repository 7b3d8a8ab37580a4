#!/usr/bin/env bash
# Traces 1-4 at 100K requests, 2048-token steps, both overlap modes: the estimator's tail split (BlendServe only,
# baselines from session 16's seed-0 rows) at seeds 0 and 2, and seed 2 of traces 2 and 3 on main (every order).
cd "$(dirname "$0")/../../.."
R=benchmarks/results/session17
run() { nice -n 19 env PYTHONPATH=. .venv/bin/python $R/variant.py traces "$@" --requests 100000 --step-tokens 2048; }
for O in nanoflow sequential; do
  [ -s $R/traces_split_s0_$O.json ] || run split --overlap $O --policies blendserve --json $R/traces_split_s0_$O.json > $R/traces_split_s0_$O.md 2>> $R/traces.log
  [ -s $R/traces_split_s2_$O.json ] || run split --overlap $O --seed 2 --policies blendserve --json $R/traces_split_s2_$O.json > $R/traces_split_s2_$O.md 2>> $R/traces.log
  [ -s $R/traces_main_s2_t23_$O.json ] || run main --overlap $O --seed 2 --workloads trace2,trace3 --json $R/traces_main_s2_t23_$O.json > $R/traces_main_s2_t23_$O.md 2>> $R/traces.log
done
