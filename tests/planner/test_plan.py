"""plan(): every policy yields a permutation; ranks partition it; BlendServe keeps DFS sharing."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from scheduler.planner import POLICIES, plan, sharing_ratio
from scheduler.planner.tree import PrefixTree
from scheduler.planner.workload import Workload

from .strategies import GPU, MODEL, workloads


@settings(max_examples=30, deadline=None)
@given(workloads(max_n=40), st.sampled_from(POLICIES), st.integers(1, 5))
def test_every_policy_gives_a_permutation_split_into_ranks(w, policy, ranks):
    pl = plan(w, MODEL, GPU, policy, ranks=ranks, kv_capacity_bytes=float(np.random.default_rng(0).choice([1e8, 6e10])))
    assert pl.order.dtype == np.int64 and sorted(pl.order.tolist()) == list(range(w.n))
    assert len(pl.rank_orders) == ranks
    assert np.concatenate(pl.rank_orders).tolist() == pl.order.tolist()     # rank-major
    assert 0.0 <= pl.sharing_ratio <= pl.stats["sharing_dfs"] + 1e-12
    assert set(pl.stats["plan_seconds"]) >= {"sort", "tree", "partition", "total"}


def _mixed(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    prefixes = [list(rng.integers(0, 50_000, 600)) for _ in range(5)]
    prompts, outs = [], []
    for i in range(n):
        kind = rng.random()
        if kind < 0.5:     # few-shot questions: long shared prefix, tiny answer
            prompts.append(prefixes[i % 5] + list(rng.integers(0, 50_000, 80)))
            outs.append(2)
        elif kind < 0.9:   # chat
            prompts.append(list(rng.integers(0, 50_000, 300)))
            outs.append(300)
        else:              # long generation
            prompts.append(list(rng.integers(0, 50_000, 100)))
            outs.append(6000)
    return Workload.from_lists(prompts, 8192, outs)


def test_baselines_are_what_they_say():
    w = _mixed(500)
    assert plan(w, MODEL, GPU, "fcfs").order.tolist() == list(range(w.n))
    assert plan(w, MODEL, GPU, "dfs").order.tolist() == PrefixTree.build(w).order.tolist()
    b1, b2 = plan(w, MODEL, GPU, "balance", seed=3), plan(w, MODEL, GPU, "balance", seed=3)
    assert b1.order.tolist() == b2.order.tolist() != plan(w, MODEL, GPU, "balance", seed=4).order.tolist()


def test_blendserve_keeps_dfs_sharing_and_blends():
    w = _mixed()
    bs = plan(w, MODEL, GPU, "blendserve")
    dfs = plan(w, MODEL, GPU, "dfs")
    assert bs.sharing_ratio >= 0.99 * dfs.sharing_ratio
    assert bs.sharing_ratio == pytest.approx(sharing_ratio(w, bs.order))
    assert bs.stats["split_recompute_tokens"] <= bs.stats["split_budget_tokens"]
    # long generations are spread through the order rather than left to the end as in DFS by density
    long_pos = np.flatnonzero(w.output_len[bs.order] > 1000) / w.n
    assert long_pos.min() < 0.1 and long_pos.max() > 0.5


def test_data_parallel_ranks_are_balanced_and_lose_little_sharing():
    w = _mixed()
    one = plan(w, MODEL, GPU, "blendserve")
    four = plan(w, MODEL, GPU, "blendserve", ranks=4)
    assert four.stats["rank_imbalance"] < 0.05
    assert four.sharing_ratio >= one.sharing_ratio - 4 * 2 * 700 / w.prompt_lens().sum()   # <= 2 paths per cut


def test_unknown_output_lengths_use_the_prior_and_bad_arguments_fail():
    w = Workload.from_lists([[1, 2], [1, 3], [4]], max_tokens=[10, 1000, 1000])
    assert sorted(plan(w, MODEL, GPU).order.tolist()) == [0, 1, 2]
    with pytest.raises(ValueError):
        plan(w, MODEL, GPU, "sjf")
    with pytest.raises(ValueError):
        plan(w, MODEL, GPU, ranks=0)
    with pytest.raises(ValueError, match="step_tokens"):
        plan(w, MODEL, GPU, step_tokens=0)
    assert plan(w, MODEL, GPU, step_tokens=512).stats["step_tokens"] == 512
    big = type(MODEL)("huge", 1e12, 100, 8192)
    with pytest.raises(ValueError):
        plan(w, big, GPU)


def test_empty_workload():
    w = Workload.from_lists([], 1, [])
    for policy in POLICIES:
        pl = plan(w, MODEL, GPU, policy, ranks=2)
        assert pl.order.size == 0 and len(pl.rank_orders) == 2 and pl.sharing_ratio == 0.0


def _tail_case(n_rest: int = 1000, n_tail: int = 10, bound: float = 4000.0, pool_tokens: float = 20_000.0):
    """A front-loaded tail: requests 0..n_tail-1 first in the order, estimated at 100 tokens, bounded at `bound`;
    the rest estimated and bounded at 5. Returns the guarded order and the tail's positions as fractions."""
    from scheduler.planner.plan import tail_guard

    n = n_rest + n_tail
    fresh, d = np.full(n, 100.0), np.full(n, 5.0)
    d[:n_tail] = 100.0
    longest = d.copy()
    longest[:n_tail] = bound
    out = tail_guard(np.arange(n), fresh, d, longest, MODEL, pool_tokens * MODEL.kv_bytes_per_token, 2048)
    return out, np.flatnonzero(out < n_tail) / n


def test_tail_guard_spreads_a_front_loaded_tail_evenly_keeping_both_orders():
    out, pos = _tail_case()
    assert sorted(out.tolist()) == list(range(1010))
    tail = out[out < 10].tolist()
    assert tail == list(range(10)) and out[out >= 10].tolist() == list(range(10, 1010))   # relative orders kept
    gaps = np.diff(pos)
    assert gaps.min() > 0.8 * gaps.mean() and gaps.max() < 1.2 * gaps.mean()          # a steady rate, no block
    # The tail area A_t = 10 (100 x 4000 + 4000^2 / 2) token-steps, the rest's 1000 (100 x 5 + 12.5): the run's
    # KV area A fills a pool of 20K tokens in A / C = 4,951 steps; the last tail start is at 1 - L / (A / C + L).
    last = 1.0 - 4000.0 / (10 * (100 * 4000 + 8e6) / 20_000 + 1000 * 512.5 / 20_000 + 4000.0)
    assert abs(pos[-1] - last * 0.95) < 0.01                                          # midpoint of the last tenth


def test_tail_guard_window_follows_the_pool():
    """More tail KV area, or a smaller pool, needs a longer window to start it; a pool that holds it all does not."""
    _, base = _tail_case()
    _, more = _tail_case(n_tail=40)
    _, small_pool = _tail_case(pool_tokens=10_000.0)
    _, big_pool = _tail_case(pool_tokens=200_000.0)
    assert more[-1] > base[-1] + 0.2 and small_pool[-1] > base[-1] + 0.1
    assert big_pool[-1] < 0.15                 # the pool starts all ten at once: only the end (L) binds


def test_tail_guard_moves_only_bounds_above_its_share_of_the_run():
    from scheduler.planner.plan import TAIL_SHARE, tail_guard

    order = np.arange(50)[::-1].copy()
    fresh, d = np.full(50, 100.0), np.full(50, 5.0)
    pool = 100 * MODEL.kv_bytes_per_token       # 50 x 512.5 token-steps of KV in a 100-token pool: 256 steps
    longest = d.copy()
    longest[[0, 1]] = 0.9 * TAIL_SHARE * 256.25        # may run longer than estimated, but not a tenth of the run
    assert tail_guard(order, fresh, d, longest, MODEL, pool, 2048).tolist() == order.tolist()
    longest[[0, 1]] = 1.1 * TAIL_SHARE * 256.25
    out = tail_guard(order, fresh, d, longest, MODEL, pool, 2048).tolist()
    assert out != order.tolist() and out.index(1) < out.index(0) < 49      # forward, in their order
