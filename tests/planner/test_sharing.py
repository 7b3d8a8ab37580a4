import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from blendserve.planner.sharing import shared_prefix_tokens, sharing_ratio
from blendserve.planner.tree import PrefixTree
from blendserve.planner.workload import Workload

from .strategies import lcp, prompts_of, workloads


@settings(max_examples=50, deadline=None)
@given(workloads(), st.randoms(use_true_random=False), st.floats(0.1, 1.0))
def test_reuse_is_the_longest_prefix_shared_with_any_earlier_request(w, rnd, keep):
    order = list(range(w.n))
    rnd.shuffle(order)
    order = order[:max(1, int(len(order) * keep))]     # a subset, like one data-parallel rank
    prompts = prompts_of(w)
    got = shared_prefix_tokens(PrefixTree.build(w), np.array(order))
    want = [max((lcp(prompts[r], prompts[q]) for q in order[:j]), default=0) for j, r in enumerate(order)]
    assert got.tolist() == want


def test_sharing_ratio_of_a_known_order():
    w = Workload.from_lists([[1, 2, 3, 4], [9], [1, 2, 3, 5], [1, 2, 3, 4]], 1)
    # in this order: 0 shares 0, 1 shares 0, 2 shares 3, 3 shares 4 of 13 prompt tokens
    assert sharing_ratio(w, np.array([0, 1, 2, 3])) == 7 / 13
    # the first request of an order never shares, so dfs of identical prompts shares (n-1)/n
    same = Workload.from_lists([[4, 4]] * 5, 1)
    assert sharing_ratio(same, np.arange(5)) == 0.8
