"""Conditional node split: budget, structure and totals after cutting."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from blendserve.planner.sharing import shared_prefix_tokens
from blendserve.planner.split import split
from blendserve.planner.tree import NodeTotals, PrefixTree, layout

from .strategies import per_request, workloads


def _ancestors(parent, v):
    while v != -1:
        yield v
        v = parent[v]


@settings(max_examples=40, deadline=None)
@given(workloads(max_n=40), st.sampled_from([0.01, 0.1, 1.0]), st.sampled_from([1.0, 4.0]))
def test_split_respects_budget_and_recomputes_totals(w, budget, min_ratio):
    t = PrefixTree.build(w)
    pr = per_request(w)
    tot = NodeTotals.annotate(t, *pr)
    s = split(t, tot, pr, budget_fraction=budget, min_ratio=min_ratio)

    assert s.recompute_tokens <= s.budget_tokens + 1e-9
    assert s.budget_tokens == budget * tot.shared[0]
    assert s.recompute_tokens == sum(t.depth[t.parent[v]] for v in s.cut)
    assert np.all(s.parent[s.cut] == 0) and np.all(t.parent[s.cut] > 0)
    # cut subtrees are disjoint and every leaf still hangs below the root exactly once
    cover = np.zeros(t.n, dtype=int)
    for v in s.cut:
        cover[t.first[v]:t.last[v] + 1] += 1
    assert cover.max(initial=0) <= 1
    assert s.moved_leaves == cover.sum()

    # totals after the split equal sums over the leaves now below each node
    comp, mem, p = pr
    below = {v: [] for v in range(t.n_nodes)}
    for k in range(t.n):
        for a in _ancestors(s.parent, t.n_internal + k):
            below[a].append(t.order[k])
    for v in range(t.n_nodes):
        reqs = np.array(below[v], dtype=int)
        assert s.totals.count[v] == len(reqs)
        assert np.isclose(s.totals.comp[v], comp[reqs].sum()) and np.isclose(s.totals.mem[v], mem[reqs].sum())
        assert s.totals.tokens[v] == p[reqs].sum()

    # the new layout keeps >= (1 - budget) of DFS sharing under an unbounded cache
    seq, _ = layout(s.parent, s.totals.rho, s.totals.count, t.n_internal)
    kept = shared_prefix_tokens(t, t.order[seq]).sum()
    assert kept >= tot.shared[0] - s.recompute_tokens


def test_split_separates_a_family_that_mixes_densities():
    """A long generation behind a shared prefix drags its compute-dense siblings right; the split fixes it."""
    from blendserve.planner.workload import Workload
    prefix = list(range(100, 150))
    prompts, outs = [], []
    for i in range(40):                       # compute-dense family behind one shared prefix
        prompts.append(prefix + [i, 7, 7])
        outs.append(1)
    prompts.append(prefix + [999, 5])          # one long generation in the same family
    outs.append(8000)
    for i in range(40):                       # memory-dense work with no shared prefix
        prompts.append([5000 + i, 1])
        outs.append(4000)
    w = Workload.from_lists(prompts, 16384, outs)
    t = PrefixTree.build(w)
    pr = per_request(w)
    tot = NodeTotals.annotate(t, *pr)
    dense, sparse = np.arange(40), np.arange(40, 81)

    def separated(parent, totals):
        seq, _ = layout(parent, totals.rho, totals.count, t.n_internal)
        pos = np.empty(w.n, dtype=int)
        pos[t.order[seq]] = np.arange(w.n)
        return pos[dense].max() < pos[sparse].min()

    assert not separated(t.parent, tot)       # the layer-wise sort alone keeps the family together
    s = split(t, tot, pr, budget_fraction=1.0)
    assert len(s.cut) > 0 and separated(s.parent, s.totals)
