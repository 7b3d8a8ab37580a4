"""Ragged-array helpers: the vectorised building blocks that let the generator
and the prefix index touch every token without a Python loop per token."""
from __future__ import annotations

import numpy as np


def ragged_arange(lengths: np.ndarray) -> np.ndarray:
    """Concatenation of arange(l) for every l in lengths, int64.

    ragged_arange([2, 0, 3]) == [0, 1, 0, 1, 2]. The position of every token
    inside its own request, computed with one cumsum instead of n aranges.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    nz = lengths[lengths > 0]
    steps = np.ones(total, dtype=np.int64)     # +1 within a segment, a jump back at each segment start
    steps[0] = 0
    steps[np.cumsum(nz)[:-1]] = 1 - nz[:-1]
    return np.cumsum(steps)


def offsets_of(lengths: np.ndarray) -> np.ndarray:
    """CSR offsets (len n+1, int64) for the given segment lengths."""
    off = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(np.asarray(lengths, dtype=np.int64), out=off[1:])
    return off
