"""The paged KV bookkeeping: shared blocks are counted not copied, and only free cached blocks are evicted, LRU."""
from __future__ import annotations

import pytest

from blendserve.worker.engines.cpu.block_manager import BlockManager, block_hash


def fill(bm: BlockManager, tokens: list[int]) -> tuple[list[int], list[int]]:
    """Allocate blocks for ``tokens`` and register the full ones, as the scheduler does after a step."""
    table = bm.allocate(bm.blocks_for(len(tokens)))
    hashes, parent = [], None
    for i in range(len(tokens) // bm.block_size):
        chunk = tuple(tokens[i * bm.block_size:(i + 1) * bm.block_size])
        parent = block_hash(parent, chunk)
        bm.register(table[i], parent, chunk)
        hashes.append(parent)
    return table, hashes


def test_prefix_blocks_are_shared_and_counted() -> None:
    bm = BlockManager(8, 4)
    a, a_hashes = fill(bm, list(range(10)))           # blocks [0..3], [4..7], and a partial one
    assert len(a) == 3 and bm.free_blocks == 5
    ids, hashes = bm.match(list(range(8)) + [99, 98], limit=9)
    assert ids == a[:2] and hashes == a_hashes      # the same blocks, not copies
    bm.take(ids)
    assert [bm.blocks[b].ref_count for b in a] == [2, 2, 1]
    assert bm.free_blocks == 5                       # sharing took nothing from the pool
    bm.free(a)
    assert [bm.blocks[b].ref_count for b in a] == [1, 1, 0] and bm.free_blocks == 6


def test_a_prefix_matches_only_whole_blocks_and_its_whole_history() -> None:
    bm = BlockManager(8, 4)
    fill(bm, [1, 2, 3, 4, 5, 6, 7, 8])
    assert len(bm.match([1, 2, 3, 4, 5, 6, 7, 0], limit=8)[0]) == 1     # the second block differs
    assert bm.match([0, 2, 3, 4, 5, 6, 7, 8], limit=8)[0] == []        # same second block, other first
    assert len(bm.match([1, 2, 3, 4, 5, 6, 7, 8, 9], limit=7)[0]) == 1  # the limit cuts at a whole block


def test_free_cached_blocks_are_evicted_least_recently_used_and_only_when_needed() -> None:
    bm = BlockManager(4, 2)
    a, _ = fill(bm, [1, 2])
    b, _ = fill(bm, [3, 4])
    bm.free(a)
    bm.free(b)
    assert bm.free_blocks == 4 and bm.cached_blocks == 2
    bm.take(bm.match([1, 2, 0], limit=2)[0])           # a is used again: b is now the least recent
    bm.free(a)
    bm.allocate(2)                                     # the two never-used blocks go first
    assert bm.cached_blocks == 2
    bm.allocate(1)
    assert bm.match([3, 4, 0], 2)[0] == [] and bm.match([1, 2, 0], 2)[0] == a
    with pytest.raises(MemoryError):
        bm.allocate(2)


def test_an_identical_block_computed_twice_is_cached_once() -> None:
    bm = BlockManager(4, 2)
    a, _ = fill(bm, [1, 2])
    b, _ = fill(bm, [1, 2])
    assert bm.cached_blocks == 1 and bm.match([1, 2, 3], 2)[0] == a
    bm.free(b)
    assert bm.free_blocks == 3 and bm.blocks[b[0]].hash is None
