"""The resource-aware prefix tree: a compressed radix tree over prompt token ids.

Stored as flat numpy arrays, not node objects, because a planning round has
hundreds of thousands of leaves. Node ids: 0 is the root, 1..n_internal-1 are
internal nodes (shared prompt segments, at least two children), and
n_internal + k is the leaf of the request at lexicographic position k
(identical prompts are distinct leaves under one node, with empty edges).

It is built from the sorted prompts and their neighbour LCP array alone
(lexsort.py): internal nodes are the LCP intervals of that array, found with
nearest-smaller-value passes, so construction has no per-node Python. Every
subtree is a contiguous range [first, last] of the lexicographic order, which
makes each subtree total a difference of two prefix sums.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import perf
from .arrayops import RangeMin, next_smaller, path_sum, prev_smaller
from .lexsort import sort_prompts
from .workload import Workload


@dataclass
class PrefixTree:
    order: np.ndarray      # int64 [n]: request at lexicographic position k
    lcp: np.ndarray        # int64 [n]: LCP of positions k-1 and k (lcp[0] = 0)
    parent: np.ndarray     # int64 [N]: parent node, -1 for the root
    depth: np.ndarray      # int64 [N]: prompt tokens from the root to the node's end
    first: np.ndarray      # int64 [N]: first lexicographic position under the node
    last: np.ndarray       # int64 [N]: last lexicographic position under the node (inclusive)
    n_internal: int        # nodes below this id are internal (root included)
    _rmq: RangeMin | None = field(default=None, repr=False)

    @property
    def n(self) -> int:
        return len(self.order)

    @property
    def n_nodes(self) -> int:
        return len(self.parent)

    @property
    def count(self) -> np.ndarray:
        """Leaves (requests) under every node."""
        return self.last - self.first + 1

    @classmethod
    def build(cls, workload: Workload) -> PrefixTree:
        order, lcp = sort_prompts(workload.tokens, workload.offsets)
        return cls.from_sorted(order, lcp, workload.prompt_lens()[order])

    @classmethod
    def from_sorted(cls, order: np.ndarray, lcp: np.ndarray, sorted_lens: np.ndarray) -> PrefixTree:
        """Build from a lexicographic order, its LCP array and the sorted prompt lengths.

        Boundary b (1..n-1) sits between leaves b-1 and b with value lcp[b];
        boundaries 0 and n are sentinels of value -1. An internal node is a
        maximal run of boundaries >= l containing one equal to l: it spans
        leaves psv(b)..nsv(b)-1, is represented by its leftmost boundary of
        value l, and its parent is the node of whichever enclosing boundary
        is deeper. A node of depth 0 is the root.
        """
        n = len(order)
        bnd = np.full(n + 1, -1, dtype=np.int64)
        bnd[1:n] = lcp[1:n]
        psv = prev_smaller(bnd, strict=True)
        nsv = next_smaller(bnd, strict=True)
        pse = prev_smaller(bnd, strict=False)
        idx = np.arange(n + 1, dtype=np.int64)
        rep = np.where((pse >= 0) & (bnd[np.maximum(pse, 0)] == bnd), pse, idx)
        while True:                       # leftmost boundary of equal value in the same node
            nxt = rep[rep]
            if np.array_equal(nxt, rep):
                break
            rep = nxt
        reps = np.flatnonzero((rep == idx) & (bnd > 0))
        m = len(reps) + 1
        node_of = np.zeros(n + 1, dtype=np.int64)          # boundary -> node (0 = root)
        node_id = np.zeros(n + 1, dtype=np.int64)
        node_id[reps] = np.arange(1, m)
        deep = bnd > 0
        node_of[deep] = node_id[rep[deep]]

        big_n = m + n
        parent = np.empty(big_n, dtype=np.int64)
        depth = np.empty(big_n, dtype=np.int64)
        first = np.empty(big_n, dtype=np.int64)
        last = np.empty(big_n, dtype=np.int64)
        parent[0], depth[0], first[0], last[0] = -1, 0, 0, n - 1
        lo, hi = psv[reps], nsv[reps]
        depth[1:m] = bnd[reps]
        first[1:m] = lo
        last[1:m] = hi - 1
        parent[1:m] = node_of[np.where(bnd[lo] >= bnd[hi], lo, hi)]
        k = np.arange(n, dtype=np.int64)
        depth[m:] = sorted_lens
        first[m:] = k
        last[m:] = k
        parent[m:] = node_of[np.where(bnd[k] >= bnd[k + 1], k, k + 1)]
        return cls(order, lcp, parent, depth, first, last, m)

    def subtree_sum(self, per_request: np.ndarray) -> np.ndarray:
        """Sum of a per-request value (indexed by request id) over every node's subtree."""
        cs = np.zeros(self.n + 1, dtype=np.float64)
        np.cumsum(np.asarray(per_request, dtype=np.float64)[self.order], out=cs[1:])
        return cs[self.last + 1] - cs[self.first]

    def shared_tokens(self) -> np.ndarray:
        """Prompt tokens a prefix cache saves inside each subtree when it runs in DFS order.

        In DFS order each leaf re-uses exactly its LCP with the previous leaf,
        so a subtree saves the sum of the LCPs strictly inside its range.
        """
        cl = np.zeros(self.n + 1, dtype=np.float64)
        np.cumsum(self.lcp, out=cl[1:])
        return cl[self.last + 1] - cl[np.minimum(self.first + 1, self.n)]

    def lcp_between(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Longest common prefix of the prompts at lexicographic positions x and y (x != y)."""
        if self._rmq is None:
            self._rmq = RangeMin(self.lcp)
        lo = np.minimum(x, y)
        hi = np.maximum(x, y)
        return self._rmq.query(lo + 1, hi + 1).astype(np.int64)


@dataclass
class NodeTotals:
    """Subtree totals of the resource model for every node (docs/design.md §3.1, §3.3)."""
    comp: np.ndarray       # seconds of dense compute, prompt sharing not deducted
    mem: np.ndarray        # seconds of KV-cache reads
    tokens: np.ndarray     # prompt tokens
    shared: np.ndarray     # prompt tokens a prefix cache need not recompute (DFS order)
    count: np.ndarray      # requests

    @property
    def sharing(self) -> np.ndarray:
        return np.divide(self.shared, self.tokens, out=np.zeros_like(self.shared), where=self.tokens > 0)

    @property
    def rho(self) -> np.ndarray:
        """Compute density (1 - s) Comp / Mem; +inf where nothing is decoded."""
        return perf.density(self.comp, self.mem, self.sharing)

    @classmethod
    def annotate(cls, tree: PrefixTree, comp: np.ndarray, mem: np.ndarray, prompt_lens: np.ndarray) -> NodeTotals:
        return cls(tree.subtree_sum(comp), tree.subtree_sum(mem), tree.subtree_sum(prompt_lens),
                   tree.shared_tokens(), tree.count.astype(np.float64))


def layout(parent: np.ndarray, key: np.ndarray, count: np.ndarray, n_internal: int) -> tuple[np.ndarray, np.ndarray]:
    """Leaves in DFS order with every node's children sorted by key, largest first.

    Returns (seq, start): seq holds the lexicographic positions of the leaves
    in that order, start[v] the position in seq of node v's first leaf. Siblings
    are ranked with one lexsort; a child's offset inside its parent is a
    segmented prefix sum of its elder siblings' leaf counts, and a leaf's
    position is the path sum of offsets from the root. Ties keep node id
    (lexicographic) order, so equal keys give plain DFS order.
    """
    nn = len(parent)
    if nn <= 1:
        return np.zeros(0, dtype=np.int64), np.zeros(nn, dtype=np.int64)
    kids = np.arange(1, nn, dtype=np.int64)
    rank = np.lexsort((kids, -np.asarray(key, dtype=np.float64)[kids], parent[kids]))
    kids = kids[rank]
    size = np.asarray(count, dtype=np.int64)[kids]
    excl = np.cumsum(size) - size
    par = parent[kids]
    seg_start = np.flatnonzero(np.concatenate(([True], par[1:] != par[:-1])))
    seg_len = np.diff(np.append(seg_start, len(kids)))
    excl -= np.repeat(excl[seg_start], seg_len)
    offset = np.zeros(nn, dtype=np.int64)
    offset[kids] = excl
    start = path_sum(parent, offset)
    leaves = start[n_internal:]
    seq = np.empty(len(leaves), dtype=np.int64)
    seq[leaves] = np.arange(len(leaves), dtype=np.int64)
    return seq, start
