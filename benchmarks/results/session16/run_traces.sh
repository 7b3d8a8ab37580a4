#!/usr/bin/env bash
# Traces 1-4 at 100K requests, 2048-token steps, both overlap modes, main's guard and the engine-clock tail.
cd "$(dirname "$0")/../../.."
R=benchmarks/results/session16
for O in nanoflow sequential; do for V in guard auto; do
  nice -n 19 env PYTHONPATH=. /work/main/.venv/bin/python $R/traces_variant.py $V --requests 100000 --step-tokens 2048 \
    --overlap $O --json $R/traces_${V}_$O.json > $R/traces_${V}_$O.md 2>> $R/traces.log
done; done
# seed 2, traces 1 and 4 (trace 4 at seed 2 was main's guard's 0.978x in session 13)
for O in nanoflow sequential; do for V in guard auto; do
  nice -n 19 env PYTHONPATH=. /work/main/.venv/bin/python $R/traces_variant.py $V --requests 100000 --step-tokens 2048 \
    --overlap $O --seed 2 --workloads trace1,trace4 --json $R/traces_seed2_${V}_$O.json > $R/traces_seed2_${V}_$O.md 2>> $R/traces.log
done; done
