"""Conditional node split: move mis-placed subtrees to the root, within a recomputation budget.

The layer-wise sort places a subtree by the density of its whole parent, so
a memory-dense child of a compute-dense parent ends up among compute-dense
work (and vice versa), where the dual scan cannot blend it well. Cutting
such a child out and hanging it from the root lets the re-sort place it
among subtrees of its own density. The price: the prefix it shared with its
former siblings (the depth of its old parent) may have to be recomputed, so
the total of those prefixes is bounded by a budget, by default 1% of the
tokens a DFS order shares (docs/design.md §3.4: keep >= 99% of DFS sharing).

Candidates are subtrees whose density is at least min_ratio (default 4x)
away from the rest of their parent's subtree, the work the layer-wise sort
keeps them next to. Selection is greedy by benefit per recomputed token,
the benefit being the candidate's estimated time times the log of its
density gap. Cut subtrees are never nested, so each moves intact.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import perf
from .tree import NodeTotals, PrefixTree

_RHO_FLOOR = 1e-6         # densities are compared on a log scale clipped to [1e-6, 1e6]


@dataclass
class SplitResult:
    parent: np.ndarray        # parent array after the split (cut nodes hang from the root)
    totals: NodeTotals        # subtree totals after the split
    cut: np.ndarray           # node ids cut out and re-inserted at the root
    moved_leaves: int         # requests under the cut nodes
    recompute_tokens: float   # prefix tokens the cuts may recompute (sum of old parents' depths)
    budget_tokens: float      # the bound recompute_tokens respects


def _mass(t: NodeTotals) -> np.ndarray:
    """Estimated seconds of a subtree with no compute/memory overlap: what misplacing it costs."""
    return (1.0 - t.sharing) * t.comp + t.mem


def _candidates(tree: PrefixTree, totals: NodeTotals, min_ratio: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(nodes, benefit, cost) of subtrees worth moving, not yet filtered for nesting or budget.

    A candidate's density differs from the rest of its parent's subtree (its
    siblings, the work it is laid out with) by at least a factor min_ratio.
    Benefit: its estimated time times the log of that factor. Cost: the
    depth of its parent, the prefix it stops sharing with its siblings.
    """
    par = tree.parent
    nodes = np.flatnonzero(par > 0)
    if nodes.size == 0:
        return nodes, np.zeros(0), np.zeros(0)
    u = par[nodes]
    comp_rest = totals.comp[u] - totals.comp[nodes]
    mem_rest = totals.mem[u] - totals.mem[nodes]
    rho_rest = perf.density(np.maximum(comp_rest, 0.0), np.maximum(mem_rest, 0.0), totals.sharing[u])
    clip = lambda r: np.log(np.clip(r, _RHO_FLOOR, 1.0 / _RHO_FLOOR))  # noqa: E731  (inf: nothing decoded)
    gap = np.abs(clip(totals.rho[nodes]) - clip(rho_rest))
    far = gap >= np.log(min_ratio)
    nodes, gap, u = nodes[far], gap[far], u[far]
    return nodes, _mass(totals)[nodes] * gap, tree.depth[u].astype(np.float64)


def _totals_after(tree: PrefixTree, totals: NodeTotals, cut: np.ndarray,
                  per_request: tuple[np.ndarray, np.ndarray, np.ndarray]) -> NodeTotals:
    """Subtree totals once the cut subtrees are detached and hung from the root.

    Nodes inside a cut keep their totals. Every other node now holds only
    its remaining leaves, which are contiguous in the lexicographic order
    with the cut ranges removed, so their sums are prefix-sum differences;
    its sharing is the LCP between consecutive remaining leaves. The root
    keeps all leaves; it shares what the remaining tree shares plus what
    each cut subtree shares inside itself.
    """
    n = tree.n
    by_lo = cut[np.argsort(tree.first[cut])]              # cut ranges are disjoint
    k = np.arange(n, dtype=np.int64)
    j = np.searchsorted(tree.first[by_lo], k, side="right") - 1
    cut_of = np.where((j >= 0) & (k <= tree.last[by_lo[np.maximum(j, 0)]]), by_lo[np.maximum(j, 0)], -1)
    taken = cut_of >= 0
    owner = cut_of[tree.first]
    inside = (owner >= 0) & (tree.last <= tree.last[np.maximum(owner, 0)])
    inside[0] = False

    keep = ~taken
    kept_pos = np.flatnonzero(keep)
    rank = np.concatenate(([0], np.cumsum(keep)))          # kept leaves before position k
    comp, mem, toks = per_request
    sums = []
    for v in (comp, mem, toks, np.ones(n)):
        cs = np.concatenate(([0.0], np.cumsum(np.where(keep, np.asarray(v, dtype=np.float64)[tree.order], 0.0))))
        sums.append(cs[tree.last + 1] - cs[tree.first])
    kept_lcp = np.zeros(len(kept_pos), dtype=np.float64)
    if len(kept_pos) > 1:
        kept_lcp[1:] = tree.lcp_between(kept_pos[:-1], kept_pos[1:])
    cl = np.concatenate(([0.0], np.cumsum(kept_lcp)))
    a = rank[tree.first]                                   # first kept leaf index in the node
    b = rank[tree.last + 1]                                # one past the last
    shared = np.where(b > a, cl[np.maximum(b, a)] - cl[np.minimum(a + 1, b)], 0.0)

    out = NodeTotals(*(np.where(inside, old, new) for old, new in
                       zip((totals.comp, totals.mem, totals.tokens, totals.shared, totals.count),
                           (sums[0], sums[1], sums[2], shared, sums[3]))))
    for arr, old in ((out.comp, totals.comp), (out.mem, totals.mem), (out.tokens, totals.tokens),
                     (out.count, totals.count)):
        arr[0] = old[0]
    out.shared[0] = shared[0] + totals.shared[cut].sum()
    return out


def split(tree: PrefixTree, totals: NodeTotals, per_request: tuple[np.ndarray, np.ndarray, np.ndarray],
          budget_fraction: float = 0.01, min_ratio: float = 4.0) -> SplitResult:
    """Cut mis-placed subtrees out to the root under the recomputation budget.

    per_request: (comp, mem, prompt_lens) indexed by request id, the same
    values `totals` was annotated from.
    """
    budget = budget_fraction * float(totals.shared[0])
    nodes, benefit, cost = _candidates(tree, totals, min_ratio)
    fits = cost <= budget
    nodes, benefit, cost = nodes[fits], benefit[fits], cost[fits]
    rank = np.lexsort((nodes, -benefit / np.maximum(cost, 1.0)))
    chosen: list[int] = []
    spent = 0.0
    taken = np.zeros(tree.n, dtype=bool)
    first, last = tree.first, tree.last
    cheapest_left = np.minimum.accumulate(cost[rank][::-1])[::-1] if len(rank) else cost
    for j, idx in enumerate(rank):
        if budget - spent < cheapest_left[j]:
            break
        c = cost[idx]
        if spent + c > budget:
            continue
        v = int(nodes[idx])
        if taken[first[v]:last[v] + 1].any():    # an ancestor or a descendant is already cut
            continue
        taken[first[v]:last[v] + 1] = True
        chosen.append(v)
        spent += c
    cut = np.array(sorted(chosen), dtype=np.int64)
    if cut.size == 0:
        return SplitResult(tree.parent, totals, cut, 0, 0.0, budget)
    parent = tree.parent.copy()
    parent[cut] = 0
    new_totals = _totals_after(tree, totals, cut, per_request)
    return SplitResult(parent, new_totals, cut, int(tree.count[cut].sum()), spent, budget)
