"""Bookkeeping of the paged KV cache: which block holds what, who uses it, what may be evicted.

Pure Python, no tensors: the pool of K/V tensors lives in ``kv_cache.py`` and is
indexed by the block ids handed out here.

* Every sequence owns a *block table*: the ids of the fixed-size blocks that
  hold its K/V, position p in block ``table[p // block_size]``.
* A block that is full is *registered* under a hash of its tokens chained with
  the hash of everything before it, so it identifies the whole prefix up to its
  end (the K/V of position i depends on tokens 0..i only). A later sequence
  whose prompt starts with the same tokens takes the very same block: its
  reference count goes up, nothing is copied.
* A block whose count drops to zero stays registered but joins the free list,
  least recently freed first. Allocation takes blocks that hold nothing useful
  first (never used or never registered), and only then evicts the least
  recently used cached block: so the prefix cache fills all KV memory that
  running sequences do not need, and never takes any from them.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


def block_hash(parent: int | None, tokens: tuple[int, ...]) -> int:
    """The identity of a full block: its tokens and (through ``parent``) every token before them."""
    return hash((parent, tokens))


@dataclass
class Block:
    ref_count: int = 0
    hash: int | None = None
    tokens: tuple[int, ...] = ()     # kept to rule out hash collisions on a cache hit


class BlockManager:
    """Allocates, shares and frees the blocks of one KV pool of ``num_blocks`` x ``block_size`` tokens."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError("the KV pool needs at least one block of at least one token")
        self.num_blocks, self.block_size = num_blocks, block_size
        # A block's record is made when the block is first handed out: a pool of a million tokens has 64K
        # blocks, and making every record up front took over a second of a worker's start.
        self.blocks: dict[int, Block] = {}
        # Free blocks that hold nothing reusable: taken first, most recently freed first
        # (a block just freed is still warm in the CPU's caches). Untouched ones are at the bottom.
        self._empty: list[int] = list(reversed(range(num_blocks)))
        # Free blocks that are registered (cached prefixes), least recently used first.
        self._cached: OrderedDict[int, None] = OrderedDict()
        self._by_hash: dict[int, int] = {}
        self.hits = 0      # blocks served from the cache (for tests and figures)

    # -- capacity -------------------------------------------------------------------------
    @property
    def free_blocks(self) -> int:
        """Blocks an allocation may take now (empty ones and evictable cached ones)."""
        return len(self._empty) + len(self._cached)

    @property
    def cached_blocks(self) -> int:
        """Registered blocks (in use or free): the prefix cache's current size."""
        return len(self._by_hash)

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    # -- prefix cache ---------------------------------------------------------------------
    def match(self, tokens: list[int], limit: int) -> tuple[list[int], list[int]]:
        """The longest run of cached full blocks that starts ``tokens`` and covers at most ``limit`` tokens.

        Returns (block ids, their chained hashes). Nothing is taken yet: see ``take``.
        """
        ids: list[int] = []
        hashes: list[int] = []
        parent = None
        bs = self.block_size
        for start in range(0, limit - bs + 1, bs):
            chunk = tuple(tokens[start:start + bs])
            h = block_hash(parent, chunk)
            block_id = self._by_hash.get(h)
            if block_id is None or self.blocks[block_id].tokens != chunk:
                break
            ids.append(block_id)
            hashes.append(h)
            parent = h
        return ids, hashes

    def cost(self, cached: list[int], new_blocks: int) -> int:
        """Free blocks that taking ``cached`` and allocating ``new_blocks`` more would use up."""
        return new_blocks + sum(1 for b in cached if self.blocks[b].ref_count == 0)

    def take(self, cached: list[int]) -> None:
        """Share cached blocks with one more sequence."""
        for block_id in cached:
            block = self.blocks[block_id]
            if block.ref_count == 0:
                del self._cached[block_id]
            block.ref_count += 1
        self.hits += len(cached)

    def register(self, block_id: int, h: int, tokens: tuple[int, ...]) -> None:
        """Publish a block that has just become full, unless an identical block is already cached."""
        if h in self._by_hash:
            return
        block = self.blocks[block_id]
        block.hash, block.tokens = h, tokens
        self._by_hash[h] = block_id

    # -- allocation -----------------------------------------------------------------------
    def allocate(self, n: int) -> list[int]:
        """n blocks for one sequence's exclusive use; the caller checked ``free_blocks`` first."""
        if n > self.free_blocks:
            raise MemoryError(f"{n} KV blocks asked for, {self.free_blocks} free")
        out = []
        for _ in range(n):
            if self._empty:
                block_id = self._empty.pop()
                block = self.blocks.get(block_id)
                if block is None:
                    block = self.blocks[block_id] = Block()
            else:
                block_id, _ = self._cached.popitem(last=False)   # evict the least recently used
                block = self.blocks[block_id]
                del self._by_hash[block.hash]
                block.hash, block.tokens = None, ()
            block.ref_count = 1
            out.append(block_id)
        return out

    def free(self, table: list[int]) -> None:
        """Release one sequence's blocks. Its last blocks become the first to evict: a
        sequence's tail is the part least likely to be shared."""
        for block_id in reversed(table):
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                if block.hash is None:
                    self._empty.append(block_id)
                else:
                    self._cached[block_id] = None
