"""Prefix sharing achieved by an execution order, under a prefix cache of unbounded size.

A request re-uses the longest prefix it shares with any request run before
it. Among earlier requests the longest common prefix is always with the
nearest earlier one on either side in lexicographic order, so it is found
with two nearest-smaller-value passes over the order positions and two range
minimum queries on the LCP array: O(n log n) numpy, no per-request Python.
"""
from __future__ import annotations

import numpy as np

from .arrayops import next_smaller, prev_smaller
from .tree import PrefixTree
from .workload import Workload


def shared_prefix_tokens(tree: PrefixTree, order: np.ndarray) -> np.ndarray:
    """Tokens each request in `order` re-uses from the requests before it in `order`.

    `order` may list any subset of the requests (one data-parallel rank, say):
    only requests in it count as earlier. Returns an int64 array aligned with order.
    """
    order = np.asarray(order, dtype=np.int64)
    if order.size == 0:
        return np.zeros(0, dtype=np.int64)
    lexpos = np.empty(tree.n, dtype=np.int64)
    lexpos[tree.order] = np.arange(tree.n, dtype=np.int64)
    lp = lexpos[order]
    when = np.argsort(lp, kind="stable")      # when[j]: order position of the j-th in lex order
    lex_sorted = lp[when]
    left = prev_smaller(when)
    right = next_smaller(when)
    shared = np.zeros(len(order), dtype=np.int64)
    j = np.flatnonzero(left >= 0)
    shared[j] = tree.lcp_between(lex_sorted[left[j]], lex_sorted[j])
    j = np.flatnonzero(right < len(order))
    shared[j] = np.maximum(shared[j], tree.lcp_between(lex_sorted[j], lex_sorted[right[j]]))
    out = np.empty(len(order), dtype=np.int64)
    out[when] = shared
    return out


def sharing_ratio(workload: Workload, order: np.ndarray, tree: PrefixTree | None = None) -> float:
    """Fraction of the prompt tokens of `order`'s requests that need not be recomputed in this order."""
    tree = tree or PrefixTree.build(workload)
    order = np.asarray(order, dtype=np.int64)
    total = float(workload.prompt_lens()[order].sum())
    return float(shared_prefix_tokens(tree, order).sum()) / total if total > 0 else 0.0
