"""Data-parallel partition: cut one admission order into R contiguous pieces of equal estimated time.

Contiguous pieces of an order that walks the tree (a DFS, or the two DFS
streams of the dual scan) keep every subtree on one rank except those the
cut passes through, so each cut loses at most one root-to-leaf path of
sharing per stream. A piece's time is estimated as max(compute, memory)
(perfect overlap, the blended case); the cuts minimise the largest piece by
bisection on that bound with a greedy fill, which is exact for contiguous
pieces because a piece's time only grows as it extends.
"""
from __future__ import annotations

import numpy as np


def piece_seconds(comp: np.ndarray, mem: np.ndarray, cuts: np.ndarray) -> np.ndarray:
    """Estimated seconds max(sum comp, sum mem) of every piece [cuts[r], cuts[r+1])."""
    cc = np.concatenate(([0.0], np.cumsum(comp)))
    cm = np.concatenate(([0.0], np.cumsum(mem)))
    return np.maximum(np.diff(cc[cuts]), np.diff(cm[cuts]))


def partition(comp: np.ndarray, mem: np.ndarray, ranks: int) -> np.ndarray:
    """Cut points (ranks + 1 of them, 0 first and n last) of the most even contiguous split.

    comp and mem are per-request seconds aligned with the order being cut.
    """
    n = len(comp)
    cc = np.concatenate(([0.0], np.cumsum(comp)))
    cm = np.concatenate(([0.0], np.cumsum(mem)))

    def fill(bound: float) -> np.ndarray:
        cuts = [0]
        for _ in range(ranks - 1):
            s = cuts[-1]
            e = min(np.searchsorted(cc, cc[s] + bound, side="right"),
                    np.searchsorted(cm, cm[s] + bound, side="right")) - 1
            cuts.append(int(min(max(e, s), n)))
        cuts.append(n)
        return np.array(cuts, dtype=np.int64)

    if ranks <= 1:
        return np.array([0, n], dtype=np.int64)
    if n == 0:
        return np.zeros(ranks + 1, dtype=np.int64)
    lo = max(cc[-1], cm[-1]) / ranks
    hi = max(cc[-1], cm[-1])
    best = fill(hi)
    for _ in range(60):
        mid = (lo + hi) / 2.0
        cuts = fill(mid)
        if piece_seconds(comp, mem, cuts)[-1] <= mid:
            hi, best = mid, cuts
        else:
            lo = mid
        if hi - lo <= 1e-9 * hi:
            break
    return best
