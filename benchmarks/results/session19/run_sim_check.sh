#!/usr/bin/env bash
# Session 19: the simulator predicts the vLLM engine on overpool from a step cost fitted on chatheavy.
# 1. the service plans chatheavy once (its DB gives the requests and the plan);
# 2. vLLM alone runs chatheavy in two orders, every step traced (the fit);
# 3. vLLM alone runs overpool (the DB of this session's first BlendServe run) in three orders, traced;
# 4. sim_vs_vllm: fitted on chatheavy's steps, predicts overpool's three orders; and, for the shape, on its own.
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=benchmarks/results/session19
OVER=${OVER:?the overpool service run directory, /tmp/bs-vllm-b-...}
V="scripts/setup_vllm.sh env PYTHONPATH=. .venv-vllm/bin/python -m"
before=$(ls -d /tmp/bs-vllm-b-* | sort)
$V benchmarks.vllm_vs_run_batch --file chatheavy --ways b --repeats 1 --json $R/vllm_chatheavy_b.jsonl
CHAT=$(comm -13 <(echo "$before") <(ls -d /tmp/bs-vllm-b-* | sort))
echo "chatheavy run: $CHAT"
$V benchmarks.vllm_engine_orders $CHAT/blendserve.db --runs 1 --orders plan fcfs --json $R/engine_chatheavy.jsonl --steps $R/steps_chatheavy.jsonl
$V benchmarks.vllm_engine_orders $OVER/blendserve.db --runs 1 --json $R/engine_overpool.jsonl --steps $R/steps_overpool.jsonl
POOL=$(grep -ho "CPU KV cache size: [0-9,]* tokens" $OVER/logs/*.log | head -1 | tr -dc 0-9)
echo "pool tokens: $POOL"
$V benchmarks.sim_vs_vllm $OVER/blendserve.db --steps $R/steps_overpool.jsonl --fit-steps $R/steps_chatheavy.jsonl --pool-tokens $POOL --json $R/sim_vs_vllm.jsonl
$V benchmarks.sim_vs_vllm $OVER/blendserve.db --steps $R/steps_overpool.jsonl --pool-tokens $POOL --json $R/sim_vs_vllm.jsonl
