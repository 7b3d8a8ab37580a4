#!/usr/bin/env bash
# The embedded engine on a GPU with random weights of Llama-3.1-8B's config, fed a hidden-style mix in the
# orders of BlendServe, DFS and FCFS; prints one table (benchmarks/device_check.py says how).
#
# Needs only torch (with numpy) on the system python: no venv, no pip, no network, no checkpoint, so it runs
# on an air-gapped GPU machine with the repository copied there. Settings (environment):
#   DEVICE=cuda  CONFIG=scripts/models/llama-3.1-8b  REQUESTS=500  MAX_OUTPUT=768  KV_GB=32  MIX=mixA
#   PYTHON=python3 (split on spaces, so PYTHON="python3 -S" works); extra arguments go to the python module.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
read -r -a py <<< "${PYTHON:-python3}"
exec env PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 "${py[@]}" -m benchmarks.device_check \
    --device "${DEVICE:-cuda}" --config "${CONFIG:-$ROOT/scripts/models/llama-3.1-8b}" \
    --requests "${REQUESTS:-500}" --max-output "${MAX_OUTPUT:-768}" --kv-gb "${KV_GB:-32}" \
    --mix "${MIX:-mixA}" "$@"
