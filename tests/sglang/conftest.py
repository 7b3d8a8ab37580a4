"""Fixtures for the tests that run SGLang itself (SGLang's CPU path, in .venv-sglang).

Modules that need `sglang` skip themselves only where it cannot be imported (the main .venv); CI builds
.venv-sglang (scripts/setup_sglang.sh) and runs this directory with its interpreter, so there they run.
SGLang's own engine always runs in a child process (a worker, or tests/sglang/engine_checks.py): when
SGLang's scheduler dies it takes its parent process down with it.
"""
from __future__ import annotations

# The CPU test bed: SGLang's native-torch layers, a 4096-token KV pool, no CUDA graphs.
CPU_ENV = {
    "SGLANG_USE_CPU_ENGINE": "1",
    "BLENDSERVE_SGLANG_DEVICE": "cpu",
    "BLENDSERVE_SGLANG_ATTENTION_BACKEND": "torch_native",
    "BLENDSERVE_SGLANG_MAX_TOTAL_TOKENS": "4096",
    "BLENDSERVE_SGLANG_MEM_FRACTION_STATIC": "0.3",
    "BLENDSERVE_SGLANG_DISABLE_CUDA_GRAPH": "1",
}
