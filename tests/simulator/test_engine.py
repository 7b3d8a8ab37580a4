"""Simulator invariants: conservation, memory bound, cache monotonicity, the optimum as an upper bound."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blendserve.planner.workload import Workload
from blendserve.simulator.cache import RadixCache
from blendserve.simulator.engine import EngineConfig, output_lengths, simulate
from blendserve.simulator.optimum import engine_bound, ideal, optimum
from blendserve.simulator.prefix import build_prefix_trie, dfs_sharing_ratio
from tests.simulator.conftest import GPU, MODEL, shared_prefix_workload


def _orders(w: Workload, seed: int = 0) -> dict[str, np.ndarray]:
    trie = build_prefix_trie(w)
    lexical = np.lexsort((trie.request_node,))   # requests grouped by their trie node: a DFS-like order
    return {"input": np.arange(w.n), "random": np.random.default_rng(seed).permutation(w.n), "grouped": lexical}


def test_every_request_finishes_and_tokens_are_conserved(small_workload):
    w = small_workload
    for order in _orders(w).values():
        r = simulate(w, order, MODEL, GPU)
        assert r.finished == w.n
        assert r.output_tokens == int(output_lengths(w).sum())
        assert r.prompt_tokens == int(w.prompt_lens().sum())
        assert 0 <= r.computed_prompt_tokens <= r.prompt_tokens


def test_kv_capacity_is_never_exceeded_even_under_preemption(small_workload):
    w = small_workload
    cap = int((w.prompt_lens() + output_lengths(w)).max() * 1.5)
    r = simulate(w, np.arange(w.n), MODEL, GPU, EngineConfig(kv_capacity_tokens=cap))
    assert r.preemptions > 0, "the test should exercise preemption"
    assert r.finished == w.n and r.output_tokens == int(output_lengths(w).sum())
    assert r.peak_kv_tokens <= cap
    assert int(r.timeline.kv_tokens.max()) <= cap


def test_bigger_prefix_cache_never_lowers_sharing():
    """Pools from 8x the largest request up. Below that the pool holds only a few running
    requests, and preemption timing (not the cache) decides which prefixes survive: there a
    larger pool can lose a little sharing (e.g. 0.0100 -> 0.0083 from 2x to 4x), which is
    the shared-pool dynamics of a real engine, not an LRU fault (see the replay test below)."""
    for seed in range(3):
        w = shared_prefix_workload(800, seed, long_out=0.0, groups=30)
        trie = build_prefix_trie(w)
        order = np.random.default_rng(seed).permutation(w.n)
        base = int((w.prompt_lens() + output_lengths(w)).max() / 0.98) + 1
        sharing = [simulate(w, order, MODEL, GPU, EngineConfig(kv_capacity_tokens=base * k), trie=trie).sharing_ratio
                   for k in (8, 16, 32, 64, 256)]
        assert all(b >= a - 1e-12 for a, b in zip(sharing, sharing[1:])), sharing
        assert sharing[-1] == pytest.approx(dfs_sharing_ratio(w, trie), abs=1e-9)


def _replay_hits(w: Workload, order, capacity: int) -> int:
    """Cached prompt tokens when requests run one at a time through a radix LRU cache of `capacity` tokens."""
    trie = build_prefix_trie(w)
    cache = RadixCache(trie)
    hits = 0
    for t, r in enumerate(order):
        node = int(trie.request_node[r])
        miss_tokens, miss, _ = cache.missing(node)
        hits += int(w.prompt_lens()[r]) - miss_tokens
        cache.acquire(node, miss, float(t))
        cache.release(node, float(t))
        if cache.resident_tokens > capacity:
            cache.evict(cache.resident_tokens - capacity)
    return hits


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=8), min_size=1, max_size=40),
       st.integers(1, 20), st.integers(0, 2**31 - 1))
def test_radix_lru_hits_grow_with_capacity(prompts, small, seed):
    """The cache alone is a stack algorithm: on the same request sequence a bigger cache hits at least as often."""
    w = Workload.from_lists(prompts, 4)
    order = np.random.default_rng(seed).permutation(w.n)
    hits = [_replay_hits(w, order, c) for c in (small, small * 2, small * 5, 10**6)]
    assert all(b >= a for a, b in zip(hits, hits[1:])), hits


@pytest.mark.parametrize("overlap, fill", [("nanoflow", "budget"), ("sequential", "budget"), ("nanoflow", "balanced")])
@pytest.mark.parametrize("efficiency", [1.0, 0.94])
def test_optimum_bounds_every_order(small_workload, efficiency, overlap, fill):
    w = small_workload
    config = EngineConfig(efficiency=efficiency, overlap=overlap, step_fill=fill)
    opt = optimum(w, MODEL, GPU, dfs_sharing_ratio(w), config)
    bound = engine_bound(w, MODEL, GPU, dfs_sharing_ratio(w), config)
    assert bound.tokens_per_s <= opt.tokens_per_s
    for name, order in _orders(w).items():
        r = simulate(w, order, MODEL, GPU, config)
        assert r.tokens_per_s <= bound.tokens_per_s * (1 + 1e-9), name


def test_single_request_time_matches_the_step_model():
    p, d = 300, 40
    w = Workload.from_lists([list(range(p))], 100, [d])
    r = simulate(w, [0], MODEL, GPU, EngineConfig(efficiency=1.0))
    c = 2 * MODEL.params / GPU.flops
    weights = MODEL.weight_bytes() / GPU.bandwidth
    kv = MODEL.kv_bytes_per_token / GPU.bandwidth
    expected = max(p * c, weights) + sum(max(c, weights + kv * (p + j + 1)) for j in range(d))
    assert r.seconds == pytest.approx(expected, rel=1e-9)
    assert r.output_tokens == d and r.computed_prompt_tokens == p


def test_sequential_overlap_adds_kv_reads_after_compute():
    """vLLM/SGLang without NanoFlow: a step is max(compute, W / B) + KV / B, never faster than NanoFlow's."""
    p, d = 300, 40
    w = Workload.from_lists([list(range(p))], 100, [d])
    r = simulate(w, [0], MODEL, GPU, EngineConfig(efficiency=1.0, overlap="sequential"))
    c = 2 * MODEL.params / GPU.flops
    weights = MODEL.weight_bytes() / GPU.bandwidth
    kv = MODEL.kv_bytes_per_token / GPU.bandwidth
    expected = max(p * c, weights) + sum(max(c, weights) + kv * (p + j + 1) for j in range(d))
    assert r.seconds == pytest.approx(expected, rel=1e-9)
    nano = simulate(w, [0], MODEL, GPU, EngineConfig(efficiency=1.0))
    assert nano.seconds <= r.seconds     # equal here: one decode never computes longer than W / B


def test_sequential_is_slower_than_nanoflow_on_a_mixed_batch(small_workload):
    """With decodes and prefills mixed, KV reads that no longer hide under compute cost time; same tokens."""
    w = small_workload
    seq = simulate(w, np.arange(w.n), MODEL, GPU, EngineConfig(overlap="sequential"))
    nano = simulate(w, np.arange(w.n), MODEL, GPU, EngineConfig(overlap="nanoflow"))
    assert seq.output_tokens == nano.output_tokens and seq.finished == w.n
    assert seq.seconds > nano.seconds


def test_t_star_adds_the_weight_reads_of_the_fewest_steps(small_workload):
    """T* = max((1 - s) T_comp, T_mem + K W / B), K = max(KV reads / pool, longest output) (docs/design.md §3.2)."""
    w = small_workload
    s = dfs_sharing_ratio(w)
    config = EngineConfig()
    base, star = ideal(w, MODEL, GPU, s), optimum(w, MODEL, GPU, s, config)
    k = max(base.t_mem * GPU.bandwidth / MODEL.kv_bytes_per_token / config.capacity(MODEL, GPU),
            float(output_lengths(w).max()))
    assert star.t_mem == pytest.approx(base.t_mem + k * MODEL.weight_bytes() / GPU.bandwidth, rel=1e-12)
    assert star.t_comp == base.t_comp and star.tokens == base.tokens
    assert star.tokens_per_s < base.tokens_per_s


def test_optimum_computes_what_a_dfs_run_with_room_computes(small_workload):
    """The optimum's compute is the simulator's: sharing saves prompt tokens, and every output token is computed.

    A DFS order on an engine whose pool never evicts reaches s_DFS exactly, so
    its compute seconds are the least any order can have; the optimum's
    compute must be that figure, not below it (as it would be if s_DFS
    discounted the output tokens too).
    """
    w = small_workload
    s = dfs_sharing_ratio(w)
    config = EngineConfig(kv_capacity_tokens=int(w.prompt_lens().sum() + output_lengths(w).sum()) * 2)
    r = simulate(w, _orders(w)["grouped"], MODEL, GPU, config)
    assert r.preemptions == 0 and r.sharing_ratio == pytest.approx(s, abs=1e-12)
    assert s > 0.1 and output_lengths(w).sum() > 0.05 * w.prompt_lens().sum()   # a wrong discount would show
    assert optimum(w, MODEL, GPU, s, config).t_fresh == pytest.approx(r.comp_seconds, rel=1e-9)


def test_utilisation_never_exceeds_efficiency(small_workload):
    r = simulate(small_workload, np.arange(small_workload.n), MODEL, GPU)
    _, cu, mu = r.timeline.utilisation(50)
    assert cu.max() <= 0.94 + 1e-9 and mu.max() <= 0.94 + 1e-9
    assert r.comp_seconds <= r.seconds and r.mem_seconds <= r.seconds


def test_rejects_bad_orders_and_oversized_requests(small_workload):
    w = small_workload
    with pytest.raises(ValueError, match="permutation"):
        simulate(w, np.zeros(w.n, dtype=np.int64), MODEL, GPU)
    with pytest.raises(ValueError, match="KV tokens"):
        simulate(w, np.arange(w.n), MODEL, GPU, EngineConfig(kv_capacity_tokens=100))
    with pytest.raises(ValueError, match="output lengths"):
        simulate(Workload.from_lists([[1, 2]], 4), [0], MODEL, GPU)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, 3), max_size=12), st.integers(1, 30)), min_size=1, max_size=25),
       st.integers(0, 2**31 - 1), st.integers(0, 3), st.sampled_from(["budget", "balanced"]))
def test_random_workloads_conserve_and_stay_bounded(rows, seed, extra, fill):
    prompts = [p for p, _ in rows]
    w = Workload.from_lists(prompts, 64, [d for _, d in rows])
    cap = int((w.prompt_lens() + output_lengths(w)).max() / 0.98) + 2 + extra * 7
    order = np.random.default_rng(seed).permutation(w.n)
    config = EngineConfig(kv_capacity_tokens=cap, step_tokens=16, max_running=4, step_fill=fill)
    r = simulate(w, order, MODEL, GPU, config)
    assert r.finished == w.n
    assert r.output_tokens == sum(d for _, d in rows)
    assert r.peak_kv_tokens <= cap
    assert r.tokens_per_s <= engine_bound(w, MODEL, GPU, dfs_sharing_ratio(w), config).tokens_per_s * (1 + 1e-9)


def test_cache_evicts_least_recently_used_unpinned_leaf_first():
    w = Workload.from_lists([[1, 2, 3], [1, 2, 4], [7, 8]], 4, [1, 1, 1])
    trie = build_prefix_trie(w)
    cache = RadixCache(trie)
    nodes = trie.request_node.tolist()
    for t, node in enumerate(nodes):
        miss_tokens, miss, _ = cache.missing(node)
        cache.acquire(node, miss, float(t))
    assert cache.resident_tokens == 6           # 1 2 | 3 | 4 | 7 8
    cache.release(nodes[2], 5.0)
    cache.release(nodes[0], 6.0)
    assert cache.evict(1) == 2                   # [7, 8] is older than [3]
    assert cache.missing(nodes[2])[0] == 2
    assert cache.evict(10) == 1                  # [3] goes; [1, 2] and [4] stay: request 1 still pins them
    assert cache.missing(nodes[1])[0] == 0
    assert cache.resident_tokens == 3


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 2), max_size=8), min_size=1, max_size=30))
def test_prefix_trie_counts_every_distinct_prefix_once(prompts):
    w = Workload.from_lists(prompts, 4)
    trie = build_prefix_trie(w)
    distinct = {tuple(p[:k]) for p in prompts for k in range(1, len(p) + 1)}
    assert trie.distinct_tokens() == len(distinct)
    assert np.array_equal(trie.depth[trie.request_node], w.prompt_lens())


def test_block_granular_prefix_hits_recompute_the_partial_block():
    """vLLM serves a prefix from cache in whole blocks and always computes a prompt's last token: a 70-token
    prefix shared by two 80-token prompts saves 64 tokens at 32-token blocks, 70 token-exact; an identical
    prompt saves its whole blocks short of the last token (64 of 80, the block holding token 80 recomputed)."""
    prefix = list(range(1000, 1070))
    prompts = [prefix + list(range(10)), prefix + list(range(10, 20)), prefix + list(range(10))]
    w = Workload.from_lists(prompts, 4, [4, 4, 4])
    order = np.arange(3)
    exact = simulate(w, order, MODEL, GPU, EngineConfig(max_running=1, step_tokens=256))
    blocks = simulate(w, order, MODEL, GPU, EngineConfig(max_running=1, step_tokens=256, cache_block_tokens=32))
    assert exact.computed_prompt_tokens == 80 + 10 + 0
    assert blocks.computed_prompt_tokens == 80 + (80 - 64) + (80 - 64)
    with pytest.raises(ValueError, match="cache_block_tokens"):
        EngineConfig(cache_block_tokens=0)


def _long_then_dense(n_long: int = 20, n_dense: int = 400) -> Workload:
    """Long generations first (short prompts, 3,000 tokens out), then compute-dense requests (2,000 in, 1 out)."""
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, 50_000, 100) for _ in range(n_long)] + \
              [rng.integers(0, 50_000, 2000) for _ in range(n_dense)]
    return Workload.from_lists(prompts, 4096, [3000] * n_long + [1] * n_dense)


def test_balanced_fill_runs_prefill_under_the_long_decodes_reads():
    """A budget-filled step is compute-bound (2048 tokens: 105 ms, a full pool's reads: 37 ms), so the dense
    prefills run first and the long decodes alone after; a balanced step takes only what hides under its
    reads, so the same compute runs while the decodes advance (engine.py, step fill)."""
    w = _long_then_dense()
    budget = simulate(w, np.arange(w.n), MODEL, GPU, EngineConfig(efficiency=1.0))
    balanced = simulate(w, np.arange(w.n), MODEL, GPU, EngineConfig(efficiency=1.0, step_fill="balanced"))
    for r in (budget, balanced):
        assert r.finished == w.n and r.output_tokens == int(output_lengths(w).sum()) and r.preemptions == 0
    assert balanced.comp_seconds == pytest.approx(budget.comp_seconds, rel=1e-9)     # the same tokens computed
    assert balanced.seconds < 0.8 * budget.seconds
    # no balanced step computes longer than its reads, bar the one token that opens the smallest chunk
    tl = balanced.timeline
    one = 2 * MODEL.params / GPU.flops
    assert np.all(tl.comp <= tl.mem + one * (1 + 1e-9)), float(np.max(tl.comp - tl.mem))
    assert np.any(budget.timeline.comp > 2 * budget.timeline.mem)


def test_balanced_fill_caps_a_lone_prompt_at_the_weight_reads():
    """With nothing decoding, a balanced step holds the tokens that compute in one read of the weights."""
    p = 3000
    w = Workload.from_lists([list(range(p))], 100, [1])
    r = simulate(w, [0], MODEL, GPU, EngineConfig(efficiency=1.0, step_fill="balanced"))
    cap = int(MODEL.weight_bytes() / GPU.bandwidth / (2 * MODEL.params / GPU.flops))
    assert 100 < cap < 2048
    assert r.steps == -(-p // cap) + 1                   # prefill chunks of `cap`, then the one decode
    budget = simulate(w, [0], MODEL, GPU, EngineConfig(efficiency=1.0))
    assert budget.steps == -(-p // 2048) + 1


def test_balanced_fill_needs_nanoflow_overlap():
    with pytest.raises(ValueError, match="nanoflow"):
        EngineConfig(overlap="sequential", step_fill="balanced")
    with pytest.raises(ValueError, match="step_fill"):
        EngineConfig(step_fill="greedy")
