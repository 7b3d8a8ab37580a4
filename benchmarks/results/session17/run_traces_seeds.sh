#!/usr/bin/env bash
# Traces 1-4 at 100K, both overlap modes, seeds 1 and 3: main (every order: the baselines) and the split (BlendServe).
cd "$(dirname "$0")/../../.."
R=benchmarks/results/session17
run() { nice -n 19 env PYTHONPATH=. .venv/bin/python $R/variant.py traces "$@" --requests 100000 --step-tokens 2048; }
for s in 1 3; do for O in nanoflow sequential; do
  [ -s $R/traces_main_all_s${s}_$O.json ] || run main --overlap $O --seed $s --json $R/traces_main_all_s${s}_$O.json > $R/traces_main_all_s${s}_$O.md 2>> $R/traces.log
  [ -s $R/traces_split_s${s}_$O.json ] || run split --overlap $O --seed $s --policies blendserve --json $R/traces_split_s${s}_$O.json > $R/traces_split_s${s}_$O.md 2>> $R/traces.log
done; done
