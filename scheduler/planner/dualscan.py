"""Dual scan: interleave a compute-dense and a memory-dense DFS stream into one admission order.

The leaves, sorted with compute-dense work on the left and memory-dense on
the right, are consumed by two cursors moving towards each other; each
cursor alone walks a DFS order, which keeps the prefix cache hot. KV memory
is split so that the running batch has the whole workload's density:
M_L = M (rho_t - rho_R) / (rho_L - rho_R) (perf.memory_split), where rho_L
and rho_R are the densities of the next cache-full of work under each cursor
(one window of the remaining range once the windows overlap, which is the
clamp near the end). Each side admits while its share holds a request's
average KV footprint (perf.kv_bytes_held) and refills from its own side as
its requests finish; finishing is simulated in decode steps (a request lives
for its estimated output length), which is enough to get the interleaving
ratio right. The engine's continuous batching consumes the result in order.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from . import perf

_SPLIT_EVERY = 32      # recompute the memory split when a cursor crosses a block of this many leaves


@dataclass
class ScanResult:
    order: np.ndarray      # int64: positions in the leaf sequence, in admission order
    side: np.ndarray       # int8: 0 = left (compute-dense) cursor, 1 = right (memory-dense)
    share: np.ndarray      # float64: that side's KV share (bytes) when the request was admitted
    held: np.ndarray       # float64: that side's KV bytes held just after admitting it
    forced: np.ndarray     # bool: admitted beyond its share because nothing at all was running


class _Windows:
    """Density of any range of the sequence, and of the cache-full under each cursor, from prefix sums."""

    def __init__(self, comp, mem, tokens, shared, kv, capacity: float) -> None:
        def cum(x):
            out = np.zeros(len(x) + 1, dtype=np.float64)
            np.cumsum(x, out=out[1:])
            return out
        self.c, self.m, self.t, self.s, self.b = (cum(x) for x in (comp, mem, tokens, shared, kv))
        n = len(kv)
        idx = np.arange(n, dtype=np.int64)
        # left window [i, right_end[i]), right window [left_end[k], k + 1): about `capacity` bytes each
        self.right_end = np.clip(np.searchsorted(self.b, self.b[:-1] + capacity, side="left"), idx + 1, n)
        self.left_end = np.clip(np.searchsorted(self.b, self.b[1:] - capacity, side="right") - 1, 0, idx)
        self.rho_left = self.rho(idx, self.right_end).tolist()
        self.rho_right = self.rho(self.left_end, idx + 1).tolist()
        self.right_end = self.right_end.tolist()
        self.left_end = self.left_end.tolist()

    def rho(self, lo, hi):
        """Density of sequence range [lo, hi); sharing counts LCPs strictly inside the range."""
        comp = self.c[hi] - self.c[lo]
        mem = self.m[hi] - self.m[lo]
        tok = self.t[hi] - self.t[lo]
        inner = self.s[hi] - self.s[np.minimum(np.asarray(lo) + 1, hi)]
        sharing = np.divide(inner, tok, out=np.zeros_like(np.asarray(tok, dtype=np.float64)), where=np.asarray(tok) > 0)
        return perf.density(comp, mem, sharing)


def dual_scan(comp: np.ndarray, mem: np.ndarray, tokens: np.ndarray, shared: np.ndarray,
              kv: np.ndarray, life: np.ndarray, capacity: float, rho_target: float) -> ScanResult:
    """Admission order for a leaf sequence sorted by density, compute-dense first.

    All arrays are aligned with the sequence: comp/mem seconds, prompt tokens,
    tokens shared with the previous leaf, average KV bytes held, and life in
    decode steps (estimated output length, at least 1).
    """
    n = len(kv)
    win = _Windows(comp, mem, tokens, shared, kv, capacity)
    b = np.asarray(kv, dtype=np.float64).tolist()
    life = np.maximum(np.asarray(life, dtype=np.float64), 1.0).tolist()
    order, side, share, held_after, forced = [], [], [], [], []
    held = [0.0, 0.0]
    running = [0, 0]
    heap: list[tuple[float, int, int, float]] = []
    now = 0.0
    i, k = 0, n - 1
    block = None
    m_side = [capacity, 0.0]

    def admit(s: int, j: int, force: bool) -> None:
        held[s] += b[j]
        running[s] += 1
        heapq.heappush(heap, (now + life[j], j, s, b[j]))
        order.append(j)
        side.append(s)
        share.append(m_side[s])
        held_after.append(held[s])
        forced.append(force)

    while i <= k:
        if (i // _SPLIT_EVERY, k // _SPLIT_EVERY) != block:
            block = (i // _SPLIT_EVERY, k // _SPLIT_EVERY)
            if win.right_end[i] > win.left_end[k]:         # windows overlap: one remaining range
                r = float(win.rho(i, k + 1))
                m_side[:] = perf.memory_split(capacity, rho_target, r, r)
            else:
                m_side[:] = perf.memory_split(capacity, rho_target, win.rho_left[i], win.rho_right[k])
        moved = False
        while i <= k and held[0] + b[i] <= m_side[0]:
            admit(0, i, False)
            i += 1
            moved = True
        while i <= k and held[1] + b[k] <= m_side[1]:
            admit(1, k, False)
            k -= 1
            moved = True
        if moved:
            continue
        if heap:
            now, _, s, freed = heapq.heappop(heap)
            running[s] -= 1
            held[s] = held[s] - freed if running[s] else 0.0
            continue
        # Nothing runs and nothing fits its share (a request larger than it): run one anyway.
        if m_side[0] >= m_side[1]:
            admit(0, i, True)
            i += 1
        else:
            admit(1, k, True)
            k -= 1
    return ScanResult(np.array(order, dtype=np.int64), np.array(side, dtype=np.int8),
                      np.array(share, dtype=np.float64), np.array(held_after, dtype=np.float64),
                      np.array(forced, dtype=bool))
