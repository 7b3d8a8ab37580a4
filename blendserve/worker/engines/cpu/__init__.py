"""The CPU engine, one concept a module: ``model`` (the Llama forward pass), ``kv_cache`` (the paged
K/V pool and attention over it), ``block_manager`` (blocks, prefix cache, eviction), ``scheduler``
(what each step runs), ``sampler`` (the next token), ``stops`` (stop strings), ``results`` (a request's result),
``core`` (one stream as the driver's adapter) and ``engine`` (the engine itself)."""
from blendserve.worker.engines.cpu.engine import CpuEngine
from blendserve.worker.engines.cpu.model import default_dtype

__all__ = ["CpuEngine", "default_dtype"]
