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
its requests finish; finishing is simulated in engine steps (a request lives
for its prefill chunks plus its estimated output length), which is enough to
get the interleaving ratio right. The engine's continuous batching consumes the result in order.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from . import perf

_SPLIT_SHIFT = 5       # recompute the memory split when a cursor crosses a block of 2**5 leaves


@dataclass
class ScanResult:
    order: np.ndarray      # int64: positions in the leaf sequence, in admission order
    side: np.ndarray       # int8: 0 = left (compute-dense) cursor, 1 = right (memory-dense)
    share: np.ndarray      # float64: that side's KV share (bytes) when the request was admitted
    held: np.ndarray       # float64: that side's KV bytes held just after admitting it
    alone: np.ndarray      # bool: admitted beyond its share, allowed only when the side ran nothing


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
    tokens shared with the previous leaf, average KV bytes held (of the part
    not shared) and life in engine steps (prefill chunks plus output tokens).

    Three rules decide which cursor admits next, simulated in engine steps:
      * memory: a side admits while its share holds the request (or when it
        runs nothing at all, so a share smaller than one request still moves);
      * pacing (Little's law): after admitting a request of footprint b and
        life L a side waits b L / M_side steps, so its requests start
        staggered and its average occupancy is its share; unpaced, long
        generations admitted together grow together, a burst of KV the
        engine must preempt, then a drought;
      * balance: the compute-dense side admits only while the admitted work
        is not denser than rho_target ((1 - s) Comp <= rho_t Mem over all
        admitted requests), the memory-dense side only while it is not
        sparser. Memory alone would let the side whose requests finish fast
        run far ahead of the other, leaving an unblended tail; with the
        balance the two streams meet when both are spent.
    """
    n = len(kv)
    win = _Windows(comp, mem, tokens, shared, kv, capacity)
    tokens = np.asarray(tokens, dtype=np.float64)
    fresh = np.divide(tokens - shared, tokens, out=np.ones_like(tokens), where=tokens > 0)
    balanced = bool(np.isfinite(rho_target))
    weight = ((comp * fresh) - (rho_target * mem if balanced else 0.0)).tolist()
    out = ([0] * n, bytearray(n), [0.0] * n, [0.0] * n, bytearray(n))
    _scan(win, np.asarray(kv, dtype=np.float64).tolist(), np.maximum(np.asarray(life, dtype=np.float64), 1.0).tolist(),
          weight, capacity, rho_target, balanced, out)
    pos, side, share, held, alone = out
    return ScanResult(np.array(pos, dtype=np.int64), np.frombuffer(bytes(side), dtype=np.int8).copy(),
                      np.array(share, dtype=np.float64), np.array(held, dtype=np.float64),
                      np.frombuffer(bytes(alone), dtype=np.bool_).copy())


def _scan(win: _Windows, b: list[float], life: list[float], weight: list[float], capacity: float,
          rho_target: float, balanced: bool, out: tuple) -> None:
    """The simulation in engine steps, filling `out` (positions, sides, shares, held, alone) in admission
    order. Plain local scalars per side (0 = left, 1 = right): h KV bytes held, r requests running, t the
    earliest step of the side's next admission (pacing), m its memory share."""
    heap: list[tuple[float, int, int, float]] = []
    h0 = h1 = t0 = t1 = now = excess = 0.0     # excess: admitted (1 - s) Comp - rho_t Mem
    r0 = r1 = 0
    m0, m1 = capacity, 0.0
    i, k, a = 0, len(b) - 1, 0
    blk_i = blk_k = -1
    while i <= k:
        if i >> _SPLIT_SHIFT != blk_i or k >> _SPLIT_SHIFT != blk_k:
            blk_i, blk_k = i >> _SPLIT_SHIFT, k >> _SPLIT_SHIFT
            m0, m1 = _shares(win, i, k, capacity, rho_target)
        before = a
        if now >= t0 and m0 > 0:       # the cheap half of _admit's rules first: most passes admit nothing
            i, h0, r0, t0, excess, a = _admit(0, i, i, k, blk_i, h0, r0, t0, m0, m1, now, excess, balanced,
                                              b, life, weight, heap, out, a)
        if now >= t1 and m1 > 0:
            k, h1, r1, t1, excess, a = _admit(1, k, i, k, blk_k, h1, r1, t1, m1, m0, now, excess, balanced,
                                              b, life, weight, heap, out, a)
        if a > before:
            continue
        # Advance to the next finish, or to the next pacing slot of a side whose turn it is and whose request fits.
        wake = now
        if m0 > 0 and t0 > now and (excess <= 0 or not balanced or m1 <= 0) and (h0 + b[i] <= m0 or r0 == 0):
            wake = t0
        if (m1 > 0 and t1 > now and (excess >= 0 or not balanced or m0 <= 0) and (h1 + b[k] <= m1 or r1 == 0)
                and (wake == now or t1 < wake)):
            wake = t1
        if heap and (wake == now or heap[0][0] <= wake):
            now, _, s, freed = heapq.heappop(heap)
            if s == 0:
                r0 -= 1
                h0 = h0 - freed if r0 else 0.0
            else:
                r1 -= 1
                h1 = h1 - freed if r1 else 0.0
        elif wake > now:
            now = wake
        else:                                  # nothing runs and the balance blocks: let either side go
            balanced = False


def _shares(win: _Windows, i: int, k: int, capacity: float, rho_target: float) -> tuple[float, float]:
    """The two sides' memory shares for the cache-full under each cursor (one range once the windows overlap)."""
    if win.right_end[i] > win.left_end[k]:
        r = float(win.rho(i, k + 1))
        return perf.memory_split(capacity, rho_target, r, r)
    return perf.memory_split(capacity, rho_target, win.rho_left[i], win.rho_right[k])


def _admit(side: int, j: int, lo: int, hi: int, blk: int, h: float, r: int, t: float, m: float, other_m: float,
           now: float, excess: float, balanced: bool, b: list[float], life: list[float], weight: list[float],
           heap: list, out: tuple, a: int) -> tuple[int, float, int, float, float, int]:
    """Admit from one cursor (left: j rising, right: j falling, within [lo, hi]) while memory, pacing and
    balance allow (dual_scan's rules): the left side while the admitted work is not denser than the target,
    the right while it is not sparser. Returns the cursor, h, r, t, the excess and the admissions so far."""
    step, sign = (1, 1.0) if side == 0 else (-1, -1.0)
    pos, sides, share, held, alone = out
    while (lo <= j <= hi and m > 0 and now >= t and (sign * excess <= 0 or not balanced or other_m <= 0)
           and (h + b[j] <= m or r == 0) and j >> _SPLIT_SHIFT == blk):
        bj, lj = b[j], life[j]
        alone[a] = h + bj > m
        h += bj
        r += 1
        t = (now if now > t else t) + bj * lj / m
        excess += weight[j]
        heapq.heappush(heap, (now + lj, j, side, bj))
        pos[a], sides[a], share[a], held[a] = j, side, m, h
        a += 1
        j += step
    return j, h, r, t, excess, a
