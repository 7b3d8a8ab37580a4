"""The vectorised primitives against plain loops."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from blendserve.planner.arrayops import RangeMin, next_smaller, path_sum, prev_smaller, ragged_arange

ints = st.lists(st.integers(0, 4), max_size=40)


@settings(max_examples=50, deadline=None)
@given(ints, st.booleans())
def test_nearest_smaller_values(a, strict):
    a = np.array(a, dtype=np.int64)
    smaller = (lambda x, y: x < y) if strict else (lambda x, y: x <= y)
    left, right = prev_smaller(a, strict), next_smaller(a, strict)
    for i in range(len(a)):
        want_l = max((j for j in range(i) if smaller(a[j], a[i])), default=-1)
        want_r = min((j for j in range(i + 1, len(a)) if smaller(a[j], a[i])), default=len(a))
        assert left[i] == want_l and right[i] == want_r


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(-5, 5), min_size=1, max_size=40), st.data())
def test_range_min(a, data):
    rm = RangeMin(np.array(a))
    lo = data.draw(st.lists(st.integers(0, len(a) - 1), min_size=1, max_size=10))
    hi = [data.draw(st.integers(x + 1, len(a))) for x in lo]
    assert rm.query(np.array(lo), np.array(hi)).tolist() == [min(a[x:y]) for x, y in zip(lo, hi)]


def test_ragged_arange_and_path_sum():
    assert ragged_arange(np.array([2, 0, 3])).tolist() == [0, 1, 0, 1, 2]
    parent = np.array([-1, 0, 1, 2, 0, 4])          # two chains under the root
    assert path_sum(parent, np.array([1, 2, 3, 4, 5, 6])).tolist() == [1, 3, 6, 10, 6, 12]
