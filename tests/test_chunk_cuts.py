"""Plan chunks: 32 requests each, or, for requests that decode nothing (embeddings), a share of prompt tokens."""
from __future__ import annotations

import numpy as np

from blendserve.core.config import Settings
from blendserve.scheduler.chunks import cut_chunks


def test_generation_is_cut_by_request_count() -> None:
    order = np.arange(70)[::-1]
    parts = cut_chunks(order, np.full(70, 64), np.full(70, 500), Settings(chunk_requests=32))
    assert [len(p) for p in parts] == [32, 32, 6]
    assert sum(parts, []) == order.tolist()


def test_work_that_decodes_nothing_is_cut_by_prompt_tokens() -> None:
    rng = np.random.default_rng(0)
    tokens = rng.integers(4, 80, 5000)
    order = rng.permutation(5000)
    parts = cut_chunks(order, np.zeros(5000, dtype=np.int64), tokens, Settings(chunk_prefill_tokens=8192))
    assert sum(parts, []) == order.tolist()
    sizes = [int(tokens[p].sum()) for p in parts]
    assert len(parts) == -(-int(tokens.sum()) // 8192)
    ends = np.cumsum(sizes)
    assert all((k + 1) * 8192 <= e < (k + 1) * 8192 + 80 for k, e in enumerate(ends[:-1]))   # each reaches its share
    assert all(8192 - 80 < s < 8192 + 80 for s in sizes[:-1]) and 0 < sizes[-1] <= 8192 + 80
    # Requests larger than a chunk's share: one each, none empty.
    big = cut_chunks(np.arange(3), np.zeros(3, dtype=np.int64), np.array([20_000, 9_000, 100]),
                     Settings(chunk_prefill_tokens=8192))
    assert big == [[0], [1], [2]]
