"""Radix prefix cache with LRU eviction, on the workload's static trie.

Models SGLang's RadixCache: a prompt's KV stays cached after its request
finishes, a new request reuses the longest cached prefix, and when memory is
needed the least recently used unreferenced *leaves* are evicted first. The
node boundaries are those of the whole workload's trie (finer than a live
radix tree's), so eviction may free a little less than a whole live node at a
time; sharing and memory accounting are otherwise the same.

A running request pins only its own end node: every ancestor then has a
resident child and cannot be evicted, which is the radix-tree invariant.
"""
from __future__ import annotations

import heapq

from blendserve.simulator.prefix import PrefixTrie


class RadixCache:
    """Resident set over trie nodes; all quantities in tokens."""

    def __init__(self, trie: PrefixTrie) -> None:
        self._parent: list[int] = trie.parent.tolist()
        self._seg: list[int] = trie.segment_tokens().tolist()
        nodes = trie.nodes
        self._resident = [False] * nodes
        self._resident[0] = True
        self._refs = [0] * nodes
        self._live_children = [0] * nodes
        self._last_use = [0.0] * nodes
        self._heap: list[tuple[float, int]] = []   # candidate leaves, validated lazily
        self.resident_tokens = 0

    def missing(self, node: int) -> tuple[int, list[int], int]:
        """Uncached tokens of the prompt ending at `node`, the missing nodes, and the deepest cached one."""
        parent, resident, seg = self._parent, self._resident, self._seg
        miss: list[int] = []
        tokens = 0
        while not resident[node]:
            miss.append(node)
            tokens += seg[node]
            node = parent[node]
        return tokens, miss, node

    def acquire(self, node: int, miss: list[int], now: float) -> None:
        """Make the prompt ending at `node` resident (miss from `missing`) and pin it."""
        parent, live, resident, seg = self._parent, self._live_children, self._resident, self._seg
        for m in miss:
            resident[m] = True
            live[parent[m]] += 1
            self.resident_tokens += seg[m]
        self._refs[node] += 1
        last = self._last_use
        while node > 0:
            last[node] = now
            node = parent[node]

    def release(self, node: int, now: float) -> None:
        """Unpin; the prompt stays cached until evicted."""
        self._refs[node] -= 1
        self._last_use[node] = now
        self._push_if_evictable(node)

    def pin(self, node: int) -> None:
        """Protect a matched prefix while making room for the rest of its prompt (SGLang's inc_lock_ref)."""
        self._refs[node] += 1

    def unpin(self, node: int) -> None:
        self._refs[node] -= 1
        self._push_if_evictable(node)

    def evict(self, tokens: int) -> int:
        """Evict LRU unpinned leaves until `tokens` are freed or none is left; returns freed tokens."""
        freed = 0
        heap, parent, live = self._heap, self._parent, self._live_children
        while freed < tokens and heap:
            stamp, node = heapq.heappop(heap)
            if not self._evictable(node) or stamp != self._last_use[node]:
                continue
            self._resident[node] = False
            self.resident_tokens -= self._seg[node]
            freed += self._seg[node]
            p = parent[node]
            live[p] -= 1
            if p > 0:
                self._push_if_evictable(p)
        return freed

    def _evictable(self, node: int) -> bool:
        return self._resident[node] and self._refs[node] == 0 and self._live_children[node] == 0

    def _push_if_evictable(self, node: int) -> None:
        if node > 0 and self._evictable(node):
            heapq.heappush(self._heap, (self._last_use[node], node))
