#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: install what the check needs from the wheels in .whl/
# (sglang and its dependencies, downloaded beforehand for that machine's Python), then run
# SmolLM2 through the whole service on SGLang, BlendServe vs DFS vs FCFS, and SGLang's own lpm order.
# Budget: under 9 minutes (four orders of 450 requests).
set -euo pipefail
cd "$(dirname "$0")/.."
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=.:${PYTHONPATH:-} HF_HUB_OFFLINE=1 BLENDSERVE_DATA_DIR=${BLENDSERVE_DATA_DIR:-/tmp/bs-gpu}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
timeout 540 python3 benchmarks/gpu_check.py --requests "${REQUESTS:-450}"
