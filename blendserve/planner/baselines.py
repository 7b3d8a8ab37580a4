"""The orders every comparison shows beside BlendServe (docs/design.md §3.10)."""
from __future__ import annotations

import numpy as np

from .tree import PrefixTree


def fcfs(n: int) -> np.ndarray:
    """File order: what vLLM's run_batch does."""
    return np.arange(n, dtype=np.int64)


def dfs(tree: PrefixTree) -> np.ndarray:
    """Prefix-tree (lexicographic) order: what SGLang or vLLM reach with sorted input."""
    return tree.order.copy()


def balance(n: int, seed: int) -> np.ndarray:
    """Seeded random order, NanoFlow-Balance: blends densities, ignores sharing."""
    return np.random.default_rng(seed).permutation(n).astype(np.int64)
