"""The static prefix structure of a workload, for the simulator's radix cache.

The simulator's prefix cache must answer "how much of this prompt is already
cached?" tens of thousands of times per run. Rather than comparing token
arrays at run time, we build once the compressed trie of *all* prompts of the
workload (internal nodes are shared segments, each request ends at one node)
and let the cache keep a resident flag per trie node. A radix cache only ever
evicts leaves, so the resident set is closed under ancestors and a lookup is a
walk up from the request's node to its deepest resident ancestor (2-4 nodes).

Construction never loops per token in Python: prompts are sorted as byte
strings (any lexicographic order keeps a shared prefix contiguous), the
longest common prefix of neighbours comes from polynomial prefix hashes by a
vectorised binary search, and the trie is the usual stack walk over the
sorted prompts and their LCP array (one Python step per request).

This is the simulator's own index, not the planner's resource-aware tree: it
carries no costs, only the node boundaries a radix cache would see.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from blendserve.planner.workload import Workload
from blendserve.simulator.ragged import ragged_arange

_HASH_BASE = np.uint64(0x9E3779B97F4A7C15)   # odd, so powers never collapse to 0 mod 2^64


@dataclass(frozen=True)
class PrefixTrie:
    """Compressed trie of all prompts. Node 0 is the root (depth 0)."""
    parent: np.ndarray        # int64 [nodes], parent[0] = -1
    depth: np.ndarray         # int64 [nodes], prompt tokens from the root to the end of the node
    request_node: np.ndarray  # int64 [n], the node at which request i's prompt ends

    @property
    def nodes(self) -> int:
        return len(self.parent)

    def segment_tokens(self) -> np.ndarray:
        """Tokens each node adds below its parent (0 for the root)."""
        seg = self.depth.copy()
        seg[1:] -= self.depth[self.parent[1:]]
        return seg

    def distinct_tokens(self) -> int:
        """Prompt tokens a cache that never evicts must compute: one per trie position."""
        return int(self.depth[1:].sum() - self.depth[self.parent[1:]].sum())


def _prefix_hashes(w: Workload) -> np.ndarray:
    """C with C[off_i + k] - C[off_i] = hash of the first k tokens of prompt i (uint64, wraps)."""
    lens = w.prompt_lens()
    pos = ragged_arange(lens)
    max_len = int(lens.max()) if len(lens) else 0
    powers = np.ones(max_len + 1, dtype=np.uint64)
    if max_len:
        powers[1:] = _HASH_BASE
        np.multiply.accumulate(powers, out=powers)
    vals = (w.tokens.astype(np.uint64) + np.uint64(1)) * powers[pos]
    c = np.zeros(len(w.tokens) + 1, dtype=np.uint64)
    np.cumsum(vals, out=c[1:])
    return c


def _neighbour_lcp(w: Workload, order: np.ndarray, c: np.ndarray) -> np.ndarray:
    """LCP (tokens) of each sorted prompt with its predecessor; lcp[0] = 0."""
    lens = w.prompt_lens()
    a, b = order[:-1], order[1:]
    oa, ob = w.offsets[a], w.offsets[b]
    lo = np.zeros(len(a), dtype=np.int64)
    hi = np.minimum(lens[a], lens[b])
    while True:
        open_ = lo < hi
        if not open_.any():
            break
        mid = np.where(open_, (lo + hi + 1) // 2, lo)
        eq = (c[oa + mid] - c[oa]) == (c[ob + mid] - c[ob])
        lo = np.where(open_ & eq, mid, lo)
        hi = np.where(open_ & ~eq, mid - 1, hi)
    return np.concatenate([[0], lo]).astype(np.int64)


def build_prefix_trie(w: Workload) -> PrefixTrie:
    """Compressed trie over the prompts of w (see the module docstring)."""
    n = w.n
    big_endian = w.tokens.astype(">i4").tobytes()   # byte order = token order
    off = w.offsets * 4
    order = np.array(sorted(range(n), key=lambda i: big_endian[off[i]:off[i + 1]]), dtype=np.int64)
    lcp = _neighbour_lcp(w, order, _prefix_hashes(w)) if n else np.zeros(0, dtype=np.int64)
    lens = w.prompt_lens()

    parent: list[int] = [-1]
    depth: list[int] = [0]
    request_node = np.zeros(n, dtype=np.int64)
    stack = [0]
    for i, shared, ln in zip(order.tolist(), lcp.tolist(), lens[order].tolist()):
        last = -1
        while depth[stack[-1]] > shared:
            last = stack.pop()
        if depth[stack[-1]] < shared:     # split the edge into `last` at depth `shared`
            parent.append(stack[-1])
            depth.append(shared)
            parent[last] = len(parent) - 1
            stack.append(len(parent) - 1)
        if ln > depth[stack[-1]]:
            parent.append(stack[-1])
            depth.append(ln)
            stack.append(len(parent) - 1)
        request_node[i] = stack[-1]
    return PrefixTrie(np.array(parent, dtype=np.int64), np.array(depth, dtype=np.int64), request_node)


def dfs_sharing_ratio(w: Workload, trie: PrefixTrie | None = None) -> float:
    """s_DFS: the fraction of prompt tokens a DFS order with an unbounded cache need not compute.

    With no eviction every trie position is computed exactly once whatever the
    order, so this is the most sharing any order can reach (s_o of docs/design.md §3.2).
    """
    total = int(w.prompt_lens().sum())
    if total == 0:
        return 0.0
    trie = trie or build_prefix_trie(w)
    return 1.0 - trie.distinct_tokens() / total
