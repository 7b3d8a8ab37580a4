"""plan(): every policy yields a permutation; ranks partition it; BlendServe keeps DFS sharing."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blendserve.planner import POLICIES, plan, sharing_ratio
from blendserve.planner.tree import PrefixTree
from blendserve.planner.workload import Workload

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


def test_on_a_balanced_engine_the_rest_is_stretched_over_the_tail_even_when_estimates_read_compute_bound():
    """Estimates that read compute-bound put the whole tail first on a budget-filled engine, where the rest
    runs at compute speed while the tail drains. An engine whose steps take only what hides under their KV
    reads runs the rest at the pace the tail's reads allow, so the rest is spread over the tail's window:
    the generations whose 20K-token peaks fit the empty pool together start at once, the others between
    the rest."""
    rng = np.random.default_rng(0)
    n_rest, n_tail = 2000, 40                         # 40 x 20K tokens: about twice an A100's pool
    prompts = [list(rng.integers(0, 50_000, 1000)) for _ in range(n_rest)] + \
              [list(rng.integers(0, 50_000, 100)) for _ in range(n_tail)]
    w = Workload.from_lists(prompts, 16, [2.0] * n_rest + [100.0] * n_tail)
    w.max_tokens[n_rest:] = 20_000                    # the tail: may decode 20K tokens, estimated at 100
    tail = set(range(n_rest, n_rest + n_tail))

    def tail_positions(fill: str) -> list[int]:
        order = plan(w, MODEL, GPU, "blendserve", step_fill=fill).order.tolist()
        assert sorted(order) == list(range(w.n))
        return [i for i, r in enumerate(order) if r in tail]

    assert tail_positions("budget") == list(range(n_tail))                 # compute-bound: the tail leads
    spread = tail_positions("balanced")
    head = sum(1 for i in spread if i < n_tail)
    assert spread[:head] == list(range(head)) and 10 < head < n_tail      # what fits the pool starts at once
    assert spread[-1] > 10 * n_tail                                          # the rest runs between the others
    assert all(b - a > 10 for a, b in zip(spread[head:], spread[head + 1:]))
    with pytest.raises(ValueError, match="step_fill"):
        plan(w, MODEL, GPU, "blendserve", step_fill="greedy")


def test_work_that_decodes_nothing_runs_shortest_first_and_keeps_prefix_order_among_equals():
    rng = np.random.default_rng(3)
    prompts = [list(rng.integers(0, 30_000, int(rng.integers(4, 80)))) for _ in range(300)]
    prompts += [[7, 7, 7, 9], [7, 7, 7, 1], [7, 7, 2, 5]]        # three of one length: lexicographic among them
    w = Workload.from_lists(prompts, 0)
    for ranks in (1, 3):
        pl = plan(w, MODEL, GPU, "blendserve", ranks=ranks)
        lens = w.prompt_lens()[pl.order]
        assert sorted(pl.order.tolist()) == list(range(w.n)) and pl.stats["prefill_only"]
        assert (np.diff(lens) >= 0).all()                        # one run, shortest first, across the ranks
    fours = [int(i) for i in pl.order if w.prompt_lens()[i] == 4]
    assert [prompts[i] for i in fours] == sorted(prompts[i] for i in fours)
    # One request that decodes makes it a blend again.
    mixed = Workload.from_lists(prompts, [0] * (len(prompts) - 1) + [16])
    assert "prefill_only" not in plan(mixed, MODEL, GPU, "blendserve").stats
