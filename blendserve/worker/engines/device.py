"""What the device a GPU engine runs on asks of its settings: whether torch sees a GPU, and the dtype."""
from __future__ import annotations


def on_gpu() -> bool:
    """Whether vLLM will run on a GPU: torch sees CUDA (vLLM's CPU build ships a CPU-only torch)."""
    import torch

    return bool(torch.cuda.is_available())


def default_dtype() -> str:
    """bfloat16 on a GPU and on CPUs that multiply it natively; float32 on the others, where vLLM's CPU
    backend emulates bfloat16 (on a 2-core AVX2 EPYC run_batch finished no request of 200 in 3 minutes)."""
    import torch

    from blendserve.worker.engines.cpu.model import default_dtype as cpu_dtype

    return "bfloat16" if torch.cuda.is_available() or cpu_dtype() == torch.bfloat16 else "float32"
