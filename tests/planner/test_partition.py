from itertools import combinations_with_replacement

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from blendserve.planner.partition import partition, piece_seconds


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 10), st.floats(0, 10)), max_size=12), st.integers(1, 4))
def test_pieces_cover_every_request_once_and_minimise_the_longest(costs, ranks):
    comp = np.array([c for c, _ in costs])
    mem = np.array([m for _, m in costs])
    cuts = partition(comp, mem, ranks)
    assert len(cuts) == ranks + 1 and cuts[0] == 0 and cuts[-1] == len(costs)
    assert np.all(np.diff(cuts) >= 0)
    covered = np.concatenate([np.arange(cuts[r], cuts[r + 1]) for r in range(ranks)])
    assert covered.tolist() == list(range(len(costs)))
    # the longest piece is as short as any contiguous split can make it
    n = len(costs)
    best = min(piece_seconds(comp, mem, np.array([0, *inner, n])).max()
               for inner in combinations_with_replacement(range(n + 1), ranks - 1))
    assert piece_seconds(comp, mem, cuts).max() <= best * (1 + 1e-6) + 1e-9


def test_many_small_requests_split_evenly():
    rng = np.random.default_rng(0)
    comp, mem = rng.random(10_000), rng.random(10_000)
    for ranks in (2, 4, 8):
        t = piece_seconds(comp, mem, partition(comp, mem, ranks))
        assert t.max() / t.mean() - 1 < 0.01
