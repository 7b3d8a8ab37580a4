"""The C++ decode attention kernel (``paged_attention.cpp``): built once per machine, or absent.

Decode attention is most of a CPU decode step (BENCHMARKS.md, CPU engine), and
torch has no attention over a paged pool: the torch path copies every
sequence's blocks into a padded batch before its fused kernel reads them. The
kernel reads the blocks in place. It is compiled by torch's extension loader
(g++ and ninja, ~30 s, cached under ``~/.cache/torch_extensions``;
``scripts/setup.sh`` builds it ahead of time) for the CPU it runs on. Where it
cannot be built (no compiler) the engine logs why and keeps the torch path;
``BLENDSERVE_CPU_NATIVE=0`` makes the engine take the torch path outright.
"""
from __future__ import annotations

import functools
import hashlib
import logging
import time
from collections.abc import Callable
from pathlib import Path

import torch

log = logging.getLogger(__name__)
SOURCE = Path(__file__).with_name("paged_attention.cpp")
# torch's loader builds under a lock file and waits for it forever; a build killed half way (Ctrl-C at a
# worker's first start) leaves the file behind, and every later start would hang. A build takes ~30 s.
STALE_LOCK_S = 600.0


def _machine_tag() -> str:
    """-march=native code runs only on CPUs like this one: the cache entry is per set of CPU flags."""
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        flags = ""
    return hashlib.sha1(flags.encode()).hexdigest()[:8]


@functools.cache
def paged_decode() -> Callable[..., torch.Tensor] | None:
    """torch.ops.blendserve.paged_decode(q, k_pool, v_pool, tables, lengths, block_size, scale), or None."""
    try:
        from torch.utils.cpp_extension import _get_build_directory, load

        name = f"blendserve_paged_attention_{_machine_tag()}"
        clear_stale_lock(Path(_get_build_directory(name, verbose=False)) / "lock")
        load(name=name, sources=[str(SOURCE)],
             extra_cflags=["-O3", "-march=native", "-fopenmp", "-fopenmp-simd"], is_python_module=False,
             verbose=False)
        return torch.ops.blendserve.paged_decode
    except Exception as e:   # no compiler, no headers, a build error: the torch path still works
        log.warning("CPU engine: the C++ decode attention kernel could not be built (%s); "
                    "decode attention runs on torch's SDPA", str(e).strip().splitlines()[-1] if str(e) else e)
        return None


def clear_stale_lock(lock: Path, stale_s: float = STALE_LOCK_S) -> bool:
    """Remove a build lock older than any build takes (see STALE_LOCK_S); True if one was removed."""
    try:
        age = time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return False
    if age < stale_s:
        return False
    log.warning("CPU engine: removing a kernel build lock left %.0f s ago by a build that did not finish (%s)",
                age, lock)
    lock.unlink(missing_ok=True)
    return True
