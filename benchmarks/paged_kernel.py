"""Decode attention over the paged pool: the C++ kernel against the torch path (gather + SDPA) it replaced.

One layer of SmolLM2's shapes (3 kv heads, 9 query heads, head_dim 64, 16-token blocks), B sequences of
L/2..L positions whose blocks lie scattered over a 93K-token pool (as after a long run), the engine's
torch threads; milliseconds per call, medians of 20, and the bytes of K/V read per second.

    PYTHONPATH=. .venv/bin/python benchmarks/paged_kernel.py > benchmarks/results/paged_kernel.txt
"""
from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

from blendserve.worker.engines.cpu.kv_cache import Chunk, KVPool, PagedAttention
from blendserve.worker.engines.cpu.native import paged_decode

KH, H, D, BS, BLOCKS = 3, 9, 64, 16, 5824


def per_call_ms(f, n: int = 20) -> float:
    f()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args()
    kernel = paged_decode()
    assert kernel is not None, "the kernel did not build"
    print(f"torch threads: {torch.get_num_threads()}")
    print("| dtype | B | L | torch path ms | kernel ms | speed-up | kernel GB/s of K/V |")
    print("|---|---|---|---|---|---|---|")
    for dtype in (torch.bfloat16, torch.float32):
        pool = KVPool(1, KH, D, BLOCKS, BS, dtype)
        pool.k[0].normal_()
        pool.v[0].normal_()
        rng = random.Random(0)
        for B, L in ((16, 256), (128, 320), (256, 160), (32, 1024), (96, 1024)):
            free = list(range(BLOCKS))
            rng.shuffle(free)
            lengths = [rng.randint(L // 2, L) for _ in range(B)]
            chunks = [Chunk(i, n - 1, 1, [free.pop() for _ in range(-(-n // BS))]) for i, n in enumerate(lengths)]
            q, k, v = (torch.randn(B, h, D, dtype=dtype) for h in (H, KH, KH))
            slow = PagedAttention(pool, chunks, 0.125)
            fast = PagedAttention(pool, chunks, 0.125, kernel)
            t_slow, t_fast = per_call_ms(lambda: slow(0, q, k, v)), per_call_ms(lambda: fast(0, q, k, v))
            gbs = sum(lengths) * KH * D * 2 * dtype.itemsize / t_fast / 1e6
            name = str(dtype).split(".")[1]
            print(f"| {name} | {B} | {L} | {t_slow:.2f} | {t_fast:.2f} | {t_slow / t_fast:.1f}x | {gbs:.1f} |",
                  flush=True)


if __name__ == "__main__":
    main()
