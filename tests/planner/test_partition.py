import numpy as np
from hypothesis import given, settings, strategies as st

from scheduler.planner.partition import partition, piece_seconds


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 10), st.floats(0, 10)), max_size=60), st.integers(1, 9))
def test_pieces_are_contiguous_and_cover_every_request_once(costs, ranks):
    comp = np.array([c for c, _ in costs])
    mem = np.array([m for _, m in costs])
    cuts = partition(comp, mem, ranks)
    assert len(cuts) == ranks + 1 and cuts[0] == 0 and cuts[-1] == len(costs)
    assert np.all(np.diff(cuts) >= 0)
    covered = np.concatenate([np.arange(cuts[r], cuts[r + 1]) for r in range(ranks)])
    assert covered.tolist() == list(range(len(costs)))
    # no piece is longer than the whole divided evenly plus the largest single request
    if len(costs):
        bound = max(comp.sum(), mem.sum()) / ranks + max(comp.max(), mem.max())
        assert piece_seconds(comp, mem, cuts).max() <= bound + 1e-9


def test_many_small_requests_split_evenly():
    rng = np.random.default_rng(0)
    comp, mem = rng.random(10_000), rng.random(10_000)
    for ranks in (2, 4, 8):
        t = piece_seconds(comp, mem, partition(comp, mem, ranks))
        assert t.max() / t.mean() - 1 < 0.01
