"""A stand-in for `sgl_kernel`: CPU TEST SCAFFOLDING ONLY, installed by scripts/setup_sglang.sh.

SGLang imports names from sgl_kernel when its modules load, with no fallback, and PyPI's sgl-kernel
is a CUDA build. On SGLang's CPU path (SGLANG_USE_CPU_ENGINE=1, attention_backend="torch_native")
those names are imported but never called, and since this package registers no
`torch.ops.sgl_kernel` ops, SGLang takes its native-torch layers. Any name resolves to a function
that raises if called, so a CPU run that reached a CUDA kernel fails loudly instead of computing
garbage. Submodules (sgl_kernel.scalar_type ...) do not exist: SGLang's ImportError fallbacks apply.
On a GPU the real sgl-kernel is used; never install this there.
"""
from __future__ import annotations

STAND_IN = True


def _missing(name: str):
    def kernel(*args, **kwargs):
        raise NotImplementedError(f"sgl_kernel.{name}: the CPU stand-in has no kernels (tests only)")

    kernel.__name__ = name
    return kernel


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    return _missing(name)
