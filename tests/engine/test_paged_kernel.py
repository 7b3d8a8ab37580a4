"""The C++ decode attention kernel against the torch path (gather + SDPA) it replaces."""
from __future__ import annotations

import random

import pytest
import torch

from blendserve.worker.engines.cpu.kv_cache import Chunk, KVPool, PagedAttention
from blendserve.worker.engines.cpu.native import paged_decode

KH, H, D, BS = 3, 9, 64, 16


@pytest.fixture(scope="module")
def kernel():
    op = paged_decode()
    assert op is not None, "the kernel must build where the tests run (g++ and ninja are in the image)"
    return op


def _step(dtype: torch.dtype, lengths: list[int], extra: list[Chunk] = ()) -> tuple[KVPool, list[Chunk]]:
    pool = KVPool(1, KH, D, 400, BS, dtype)
    gen = torch.Generator().manual_seed(0)
    pool.k[0].copy_(torch.randn(pool.k[0].shape, generator=gen))
    pool.v[0].copy_(torch.randn(pool.v[0].shape, generator=gen))
    free = list(range(400))
    random.Random(1).shuffle(free)      # blocks scattered over the pool, as after a long run
    chunks = [Chunk(i, n - 1, 1, [free.pop() for _ in range(-(-n // BS))]) for i, n in enumerate(lengths)]
    for c in extra:
        c.block_table = [free.pop() for _ in range(-(-(c.start + c.n) // BS))]
    return pool, chunks + list(extra)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_kernel_matches_gather_and_sdpa(kernel, dtype: torch.dtype) -> None:
    lengths = [1, 2, 15, 16, 17, 100, 333, 700]        # block edges, one position, long and short together
    pool, chunks = _step(dtype, lengths)
    qk = torch.randn(len(chunks), H + KH, D, dtype=dtype)
    q = qk[:, :H]                                      # strided, as the model hands it over
    k, v = torch.randn(len(chunks), KH, D, dtype=dtype), torch.randn(len(chunks), KH, D, dtype=dtype)
    want = PagedAttention(pool, chunks, 0.125)(0, q, k, v)
    attn = PagedAttention(pool, chunks, 0.125, kernel)
    assert attn.kernel_decodes is not None and not attn.decodes
    got = attn(0, q, k, v)
    tol = 1e-5 if dtype == torch.float32 else 2e-2     # bfloat16 outputs: about one rounding step
    assert torch.allclose(got.float(), want.float(), atol=tol, rtol=tol)


def test_kernel_decodes_beside_prefills_and_drafts(kernel) -> None:
    """A mixed step: the kernel takes the one-token chunks and the short draft (a row per token), the prefill
    keeps SDPA."""
    dtype = torch.float32
    prefill, draft = Chunk(3, 40, 30, []), Chunk(33, 50, 4, [])
    pool, chunks = _step(dtype, [5, 60, 200], [prefill, draft])
    n = 3 + 30 + 4
    q, k, v = torch.randn(n, H, D), torch.randn(n, KH, D), torch.randn(n, KH, D)
    want = PagedAttention(pool, chunks, 0.125)(0, q, k, v)
    attn = PagedAttention(pool, chunks, 0.125, kernel)
    assert attn.kernel_decodes.rows.tolist() == [0, 1, 2, 33, 34, 35, 36] and len(attn.prefills) == 1
    assert attn.kernel_decodes.lengths.tolist() == [5, 60, 200, 51, 52, 53, 54]
    got = attn(0, q, k, v)
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5)


def test_kernel_rejects_what_it_cannot_read(kernel) -> None:
    pool = KVPool(1, KH, D, 4, BS, torch.float32)
    q = torch.randn(1, H, D, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="one dtype"):
        kernel(q, pool.k[0], pool.v[0], torch.zeros(1, 1, dtype=torch.int32), torch.ones(1, dtype=torch.int32),
               BS, 0.125)


def test_the_torch_path_can_be_chosen(tiny_model, monkeypatch) -> None:
    from blendserve.core.engine_settings import CpuEngineSettings
    from blendserve.worker.engines.cpu import CpuEngine

    assert CpuEngine(tiny_model, "tiny", threads=1, kv_capacity_tokens=64,
                     config=CpuEngineSettings()).decode_kernel is not None
    monkeypatch.setenv("BLENDSERVE_CPU_NATIVE", "0")
    assert CpuEngine(tiny_model, "tiny", threads=1, kv_capacity_tokens=64,
                     config=CpuEngineSettings()).decode_kernel is None



def test_a_stale_build_lock_is_removed_and_a_fresh_one_kept(tmp_path):
    """A build killed half way leaves torch's lock file, on which every later build would wait forever."""
    import os
    import time

    from blendserve.worker.engines.cpu.native import clear_stale_lock

    lock = tmp_path / "lock"
    assert not clear_stale_lock(lock)                       # none there
    lock.touch()
    assert not clear_stale_lock(lock) and lock.exists()     # a build running now keeps its lock
    old = time.time() - 3600
    os.utime(lock, (old, old))
    assert clear_stale_lock(lock) and not lock.exists()
