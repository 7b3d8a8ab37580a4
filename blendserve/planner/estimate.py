"""Output lengths are unknown before running: warm-up sampling and per-subtree estimates.

Requests behind the same prompt prefix (one application's system prompt,
one benchmark's few-shot header) tend to have similar output lengths, so a
small sample of every subtree, run first, predicts the rest (docs/design.md §3.6: the
paper found 1% as good as 100%). Sampled requests are real requests: their
results go to the output file like any other.
"""
from __future__ import annotations

import numpy as np

from .tree import PrefixTree
from .workload import Workload

MIN_CAP_SAMPLES = 5    # samples of one max_tokens value before the warm-up may call that cap loose
LONG_SHARE = 0.25      # a cap is loose while fewer than this share of its samples reach the tail


def warmup_sample(workload: Workload, fraction: float = 0.01, min_subtree: int = 64, seed: int = 0,
                  tree: PrefixTree | None = None) -> np.ndarray:
    """Request ids to run first: about `fraction` of every subtree, one at least in any of >= min_subtree.

    One random request out of every consecutive block of 1/fraction requests
    in prefix-tree order: every subtree is a contiguous range of that order,
    so each gets its proportional share. Subtrees of at least min_subtree
    requests that the blocks missed get one random request each.
    """
    n = workload.n
    if n == 0 or fraction <= 0:
        return np.zeros(0, dtype=np.int64)
    tree = tree or PrefixTree.build(workload)
    rng = np.random.default_rng(seed)
    k = max(1, int(round(1.0 / min(fraction, 1.0))))
    starts = np.arange(0, n, k, dtype=np.int64)
    pick = starts + rng.integers(0, k, size=len(starts))
    pos = pick[pick < n]                          # the last, partial block is sampled in proportion

    hit = np.zeros(n + 1, dtype=np.int64)
    hit[pos + 1] = 1
    np.cumsum(hit, out=hit)
    m = tree.n_internal
    first, last = tree.first[:m], tree.last[:m]
    lacking = (tree.count[:m] >= min_subtree) & (hit[last + 1] == hit[first])
    has_lacking_child = np.zeros(m, dtype=bool)
    has_lacking_child[tree.parent[1:m][lacking[1:]]] = True
    minimal = np.flatnonzero(lacking & ~has_lacking_child)
    extra = first[minimal] + (rng.random(len(minimal)) * tree.count[minimal]).astype(np.int64)
    return np.sort(tree.order[np.concatenate((pos, extra))])


def _subtree_means(tree: PrefixTree, n: int, sampled: np.ndarray, observed: np.ndarray,
                   prior: float) -> np.ndarray:
    """Per request: the mean of `observed` over the samples of the smallest prefix subtree above it that has any.

    Sampled requests keep their own value; where no shared prefix above a
    request was sampled (only the root is left), `prior`. Not capped.
    """
    sampled = np.asarray(sampled, dtype=np.int64)
    observed = np.asarray(observed, dtype=np.float64)
    is_sampled = np.zeros(n, dtype=np.float64)
    is_sampled[sampled] = 1.0
    value = np.zeros(n, dtype=np.float64)
    value[sampled] = observed
    cnt = tree.subtree_sum(is_sampled)
    tot = tree.subtree_sum(value)
    m = tree.n_internal
    # nearest node at or above each node (below the root) holding samples: pointer doubling
    near = np.where(cnt[:m] > 0, np.arange(m), tree.parent[:m])
    near[0] = 0
    while True:
        nxt = np.where(cnt[near] > 0, near, near[near])
        nxt[near == 0] = 0
        if np.array_equal(nxt, near):
            break
        near = nxt
    holder = near[tree.parent[m:]]
    est_lex = np.where(holder > 0, tot[holder] / np.maximum(cnt[holder], 1.0), float(prior))
    est = np.empty(n, dtype=np.float64)
    est[tree.order] = est_lex
    est[sampled] = observed
    return est


def estimate_output_lengths(workload: Workload, sampled: np.ndarray, observed: np.ndarray, prior: float,
                            tree: PrefixTree | None = None) -> np.ndarray:
    """Output length estimate for every request, capped by its max_tokens.

    Sampled requests keep their observed length. Every other request takes
    the mean of the samples in the smallest prefix subtree that has any (its
    own subtree first, then the enclosing ones, which hold its siblings);
    where no shared prefix above it was sampled (only the root is left),
    `prior`. A NaN prior stays NaN, which lets a caller find the requests
    that no sample covers (the service samples those first).
    """
    tree = tree or PrefixTree.build(workload)
    est = _subtree_means(tree, workload.n, sampled, observed, prior)
    return np.minimum(est, workload.max_tokens.astype(np.float64))


def effective_output_lengths(workload: Workload, sampled: np.ndarray, observed: np.ndarray,
                             tree: PrefixTree | None = None, strata: np.ndarray | None = None) -> np.ndarray:
    """Per request, the output length whose KV reads equal the expected KV reads of its subtree's samples.

    A request's memory work p d + d^2/2 is convex in d, so the subtree's mean
    length understates the memory of a heavy-tailed subtree by about
    E[d^2] / E[d]^2. That is the case that matters: where no prefix marks a
    dataset, a few 16K-token generations hide among short chats under the
    root, a 1% sample catches one or two of them, and the mean length (80
    tokens) made the whole band look compute-dense (trace 4: estimated
    rho(root) 9-36 against a true 0.90). Here each request gets
    d_eff = sqrt(p^2 + 2 p E[d] + E[d^2]) - p, from the subtree means of d and
    d^2 (the prior: the means over all samples), so p d_eff + d_eff^2 / 2 =
    E[p d + d^2 / 2]: the planner's memory split and pacing see the band's
    true expected KV, spread over all its requests, since the tree cannot say
    which of them are the long ones. Capped by max_tokens; sampled requests
    keep their observed length; with no sample at all, min(max_tokens, 256).

    strata (optional, one class per request, e.g. long-bound or not: plan.tail_threshold): a sample
    informs only the requests of its own class, as if each class had a tree
    of its own; a class with no sample falls back to all samples. The
    classes a caller can tell apart without a marker are those of the
    request's own bound (max_tokens): a request that may not decode 16K
    tokens learns nothing about its KV from a sample that did.
    """
    tree = tree or PrefixTree.build(workload)
    sampled = np.asarray(sampled, dtype=np.int64)
    observed = np.asarray(observed, dtype=np.float64)
    if strata is None or len(observed) == 0:
        return _effective(workload, sampled, observed, tree)
    strata = np.asarray(strata)
    out = np.empty(workload.n, dtype=np.float64)
    for k in np.unique(strata):
        members = strata == k
        own = members[sampled]
        use = own if own.any() else np.ones(len(sampled), dtype=bool)
        out[members] = _effective(workload, sampled[use], observed[use], tree)[members]
    return out


def _effective(workload: Workload, sampled: np.ndarray, observed: np.ndarray, tree: PrefixTree) -> np.ndarray:
    cap = workload.max_tokens.astype(np.float64)
    if len(observed) == 0:
        return np.minimum(cap, 256.0)
    mean = _subtree_means(tree, workload.n, sampled, observed, float(observed.mean()))
    square = _subtree_means(tree, workload.n, sampled, observed * observed, float(np.mean(observed * observed)))
    p = workload.prompt_lens().astype(np.float64)
    d_eff = np.sqrt(np.maximum(p * p + 2.0 * p * mean + square, 0.0)) - p
    return np.minimum(np.maximum(d_eff, mean), cap)


def loose_caps(max_tokens: np.ndarray, sampled_caps: np.ndarray, observed: np.ndarray,
               threshold: float) -> np.ndarray:
    """Per request: whether the samples that share its max_tokens show the cap to be far above its outputs.

    The plan places a request whose bound reaches the tail (plan.tail_threshold)
    at that bound, because no token says which short prompt asks for a 16K-token
    video description. But users set caps per job, generously: chats capped at
    4096 or 8192 decode a few hundred tokens, and a file where thousands of them
    counted as tail had its pool clock run on bounds ten times their outputs
    (0.955x DFS on a file written blind to the planner; BENCHMARKS.md,
    Planner). So a cap value is a class the warm-up can judge: with at least
    MIN_CAP_SAMPLES samples, fewer than LONG_SHARE of which reached the
    threshold, the cap says nothing about length and the request is planned at
    its estimate; a cap whose samples do run long (a captioning job's 20000), or
    that too few samples cover, stays a bound. A rare long output behind a loose
    cap costs at most its own length once; guarding thousands of short ones at
    their caps costs the whole run's pacing. Such requests are not the tail
    either when a first estimate mixes in the long samples (chats without a
    shared prefix learn from the root, where the video descriptions are): their
    own samples say short, so they are estimated among the short-bound class.
    """
    n = len(max_tokens)
    _, cls = np.unique(np.concatenate([np.asarray(max_tokens), np.asarray(sampled_caps)]), return_inverse=True)
    cls = cls.reshape(-1)
    count = np.bincount(cls[n:], minlength=cls.max(initial=-1) + 1)
    long = np.bincount(cls[n:], weights=np.asarray(observed, dtype=np.float64) >= threshold, minlength=len(count))
    return ((count >= MIN_CAP_SAMPLES) & (long < LONG_SHARE * count))[cls[:n]]


def tail_split_lengths(workload: Workload, sampled: np.ndarray, observed: np.ndarray, first: np.ndarray,
                       threshold: float, tree: PrefixTree) -> tuple[np.ndarray, np.ndarray]:
    """Effective lengths with the tail's samples kept apart, and the output bound the plan guards.

    The tail (plan.tail_threshold) is every request whose bound or first
    estimate reaches `threshold`, except those behind a loose cap (loose_caps);
    effective_output_lengths then estimates the tail and the rest each from its
    own samples (strata). The bound is max_tokens, or the estimate where the cap
    is loose. The simulator's runner and the service (blendserve/scheduler/blend.py) share it.
    """
    cap = workload.max_tokens
    loose = loose_caps(cap, cap[sampled], observed, threshold)
    tail = ~loose & (np.maximum(cap, first) >= threshold)
    effective = effective_output_lengths(workload, sampled, observed, tree=tree, strata=tail)
    return effective, np.where(loose, np.minimum(cap, np.ceil(effective)), cap)
