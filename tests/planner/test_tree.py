"""The prefix tree: exact sort, LCP intervals, subtree totals, and DFS layout."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from blendserve.planner.lexsort import sort_prompts
from blendserve.planner.tree import NodeTotals, PrefixTree, layout
from blendserve.planner.workload import Workload

from .strategies import lcp, per_request, prompt_lists, prompts_of, workloads


@settings(max_examples=50, deadline=None)
@given(prompt_lists(), st.sampled_from([0, 2**20, 2**30]))
def test_sort_is_lexicographic_with_exact_lcp(prompts, shift):
    # shift moves ids out of the 21-bit packing range to exercise the wider packings
    prompts = [[t + shift for t in p] for p in prompts]
    w = Workload.from_lists(prompts, 1)
    order, lcps = sort_prompts(w.tokens, w.offsets)
    assert order.tolist() == sorted(range(len(prompts)), key=lambda i: (prompts[i], i))
    assert lcps[0] == 0
    assert all(lcps[k] == lcp(prompts[order[k - 1]], prompts[order[k]]) for k in range(1, len(prompts)))


def test_sort_handles_negative_and_extreme_int32_ids():
    prompts = [[2**31 - 1, 0], [-2**31], [-2**31, 5], [0, 0, 0], [0, 0]]
    w = Workload.from_lists(prompts, 1)
    order, lcps = sort_prompts(w.tokens, w.offsets)
    assert order.tolist() == sorted(range(5), key=lambda i: prompts[i])
    assert lcps.tolist() == [0, 1, 0, 2, 0]


@settings(max_examples=40, deadline=None)
@given(workloads())
def test_internal_nodes_are_the_shared_prefixes(w):
    t = PrefixTree.build(w)
    prompts = prompts_of(w)
    m = t.n_internal
    kids = np.bincount(t.parent[1:], minlength=t.n_nodes)
    for v in range(t.n_nodes):
        members = [prompts[r] for r in t.order[t.first[v]:t.last[v] + 1]]
        common = min(len(members[0]), *(lcp(members[0], q) for q in members))
        if 0 < v < m:
            assert kids[v] >= 2                      # compressed: no unary internal nodes
            assert common == t.depth[v]              # the node is exactly the shared prefix
        if v >= m:
            assert t.depth[v] == len(members[0]) and t.count[v] == 1
        if v > 0:
            u = t.parent[v]
            assert t.first[u] <= t.first[v] and t.last[v] <= t.last[u]
            assert t.depth[u] < t.depth[v] or (v >= m and t.depth[u] == t.depth[v])
            # leaves outside the parent share less than its depth with the node's leaves
            for k in (t.first[u] - 1, t.last[u] + 1):
                if 0 <= k < t.n:
                    assert lcp(prompts[t.order[k]], members[0]) < max(t.depth[u], 1) or u == 0


@settings(max_examples=40, deadline=None)
@given(workloads())
def test_subtree_totals_equal_sums_over_leaves(w):
    t = PrefixTree.build(w)
    comp, mem, p = per_request(w)
    tot = NodeTotals.annotate(t, comp, mem, p)
    prompts = prompts_of(w)
    for v in range(t.n_nodes):
        reqs = t.order[t.first[v]:t.last[v] + 1]
        assert np.isclose(tot.comp[v], comp[reqs].sum())
        assert np.isclose(tot.mem[v], mem[reqs].sum())
        assert tot.tokens[v] == p[reqs].sum() and tot.count[v] == len(reqs)
        # DFS inside the subtree re-uses, per request, its LCP with the previous one
        shared = sum(lcp(prompts[a], prompts[b]) for a, b in zip(reqs[:-1], reqs[1:]))
        assert tot.shared[v] == shared
    assert np.all(tot.rho >= 0)


@settings(max_examples=40, deadline=None)
@given(workloads(), st.randoms(use_true_random=False))
def test_layout_visits_every_shared_prefix_contiguously_and_sorts_siblings(w, rnd):
    t = PrefixTree.build(w)
    key = np.array([rnd.random() for _ in range(t.n_nodes)])
    seq, start = layout(t.parent, key, t.count, t.n_internal)
    assert sorted(seq.tolist()) == list(range(t.n))
    prompts = prompts_of(w)
    ordered = [prompts[t.order[k]] for k in seq]
    # any two requests sharing L tokens have only requests sharing >= L tokens between them:
    # equivalently, the LCP of any pair is the minimum of the neighbour LCPs between them
    for i in range(len(ordered)):
        running = None
        for j in range(i + 1, len(ordered)):
            step = lcp(ordered[j - 1], ordered[j])
            running = step if running is None else min(running, step)
            assert lcp(ordered[i], ordered[j]) == running
    # siblings appear by decreasing key
    for u in range(t.n_internal):
        kids = np.flatnonzero(t.parent == u)
        by_pos = kids[np.argsort(start[kids])]
        assert np.all(np.diff(key[by_pos]) <= 0)
