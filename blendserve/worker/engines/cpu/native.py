"""The CPU engine's C++ kernels, built together once per machine, or absent.

* ``paged_decode`` (``paged_attention.cpp``): decode attention is most of a
  CPU decode step (BENCHMARKS.md, CPU engine), and torch has no attention over
  a paged pool: the torch path copies every sequence's blocks into a padded
  batch before its fused kernel reads them. The kernel reads the blocks in place.
* ``apply_token_mask`` (``token_mask.cpp``): structured output's grammar mask
  over a step's constrained rows, a word of the bitmask at a time (xgrammar's
  CPU kernel tests every token's bit: at 256 constrained rows that was a fifth
  of a decode step).

They are compiled by torch's extension loader (g++ and ninja, ~30 s, cached
under ``~/.cache/torch_extensions``; ``scripts/setup.sh`` builds them ahead of
time) for the CPU they run on. Where they cannot be built (no compiler) the
engine logs why and keeps the torch path (xgrammar's kernel for the mask);
``BLENDSERVE_CPU_NATIVE=0`` makes the engine take those paths outright.
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
SOURCES = [Path(__file__).with_name(name) for name in ("paged_attention.cpp", "token_mask.cpp")]
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
def _built() -> bool:
    """Build (or load from the cache) the kernels' library; False, logged, where it cannot be built."""
    try:
        from torch.utils.cpp_extension import _get_build_directory, load

        name = f"blendserve_kernels_{_machine_tag()}"
        clear_stale_lock(Path(_get_build_directory(name, verbose=False)) / "lock")
        load(name=name, sources=[str(s) for s in SOURCES],
             extra_cflags=["-O3", "-march=native", "-fopenmp", "-fopenmp-simd"], is_python_module=False,
             verbose=False)
        return True
    except Exception as e:   # no compiler, no headers, a build error: the torch paths still work
        log.warning("CPU engine: the C++ kernels could not be built (%s); decode attention runs on torch's SDPA "
                    "and grammar masks on xgrammar's kernel", str(e).strip().splitlines()[-1] if str(e) else e)
        return False


def paged_decode() -> Callable[..., torch.Tensor] | None:
    """torch.ops.blendserve.paged_decode(q, k_pool, v_pool, tables, lengths, block_size, scale), or None."""
    return torch.ops.blendserve.paged_decode if _built() else None


def token_mask() -> Callable[..., None] | None:
    """torch.ops.blendserve.apply_token_mask(logits, bitmask, rows, vocab) (in place), or None."""
    return torch.ops.blendserve.apply_token_mask if _built() else None


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
