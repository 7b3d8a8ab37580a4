"""Warm-up sampling and output-length estimates per prefix subtree."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from blendserve.planner.estimate import effective_output_lengths, estimate_output_lengths, loose_caps, warmup_sample
from blendserve.planner.tree import PrefixTree
from blendserve.planner.workload import Workload

from .strategies import workloads


def _families(sizes, max_tokens=4096):
    """Family f: sizes[f] prompts behind prefix [f, f, f]; plus nothing else."""
    prompts = [[f, f, f, 1000 + i] for f, s in enumerate(sizes) for i in range(s)]
    return Workload.from_lists(prompts, max_tokens)


def test_sample_is_about_one_percent_of_every_large_subtree_and_one_of_each_mid_one():
    w = _families([5000, 1000, 80, 10])
    s = warmup_sample(w, fraction=0.01, min_subtree=64, seed=1)
    fam = w.tokens[w.offsets[:-1]][s]
    counts = np.bincount(fam, minlength=4)
    assert 45 <= counts[0] <= 55 and 8 <= counts[1] <= 12
    assert counts[2] >= 1                     # 80 >= min_subtree: at least one sample
    assert len(np.unique(s)) == len(s) and np.all(np.diff(s) > 0)


@settings(max_examples=50, deadline=None)
@given(workloads(max_n=60), st.floats(0.05, 1.0), st.integers(1, 8), st.integers(0, 5))
def test_every_subtree_at_or_above_min_size_is_sampled(w, fraction, min_subtree, seed):
    t = PrefixTree.build(w)
    s = warmup_sample(w, fraction=fraction, min_subtree=min_subtree, seed=seed, tree=t)
    assert len(np.unique(s)) == len(s) and (len(s) == 0 or (s.min() >= 0 and s.max() < w.n))
    lexpos = np.empty(w.n, dtype=int)
    lexpos[t.order] = np.arange(w.n)
    hit = np.zeros(w.n, dtype=bool)
    hit[lexpos[s]] = True
    for v in range(t.n_internal):
        if t.count[v] >= min_subtree:
            assert hit[t.first[v]:t.last[v] + 1].any()


def test_estimates_use_subtree_then_sibling_then_prior_and_cap():
    # family 0: [0,0,0,...] with two sub-families [0,0,0,5,...] and [0,0,0,6,...]; family 1 alone
    prompts = [[0, 0, 0, 5, i] for i in range(4)] + [[0, 0, 0, 6, i] for i in range(4)] + [[9, 9, i] for i in range(3)]
    w = Workload.from_lists(prompts, max_tokens=[1000] * 10 + [50])
    sampled = np.array([0, 1])                # both in sub-family 5
    est = estimate_output_lengths(w, sampled, np.array([100.0, 300.0]), prior=42.0)
    assert est[[0, 1]].tolist() == [100.0, 300.0]         # sampled keep their results
    assert est[[2, 3]].tolist() == [200.0, 200.0]         # own subtree's mean
    assert est[[4, 5, 6, 7]].tolist() == [200.0] * 4      # sibling subtree's, via the family
    assert est[[8, 9]].tolist() == [42.0, 42.0]           # no sample under their prefix: the prior
    assert est[10] == 42.0 and est.min() >= 0
    capped = estimate_output_lengths(w, sampled, np.array([100.0, 300.0]), prior=420.0)
    assert capped[10] == 50.0                              # capped by max_tokens


def test_a_nan_prior_marks_requests_no_sample_covers():
    w = _families([3, 3])
    est = estimate_output_lengths(w, np.array([0]), np.array([7.0]), prior=np.nan)
    assert est[:3].tolist() == [7.0, 7.0, 7.0] and np.isnan(est[3:]).all()


def test_estimates_come_from_the_tree_alone_on_traces_without_a_dataset_marker():
    """Trace #1 as the paper's datasets are: no token marks a dataset. Requests behind a shared prefix (MMLU's
    subjects, BurstGPT's system prompts) are estimated from their subtree's 1% sample, close to the truth;
    requests that share no prefix cannot be told apart by the tree (an OpenVid prompt from a BurstGPT one), so
    they all get the prior, whatever their dataset: the limit that no marker leaves (see BENCHMARKS.md)."""
    from blendserve.simulator import workloads

    w = workloads.generate("trace1", 12_000, seed=2)
    assert w.output_len is not None
    true = w.output_len
    tree = PrefixTree.build(w)
    sample = warmup_sample(w, 0.01, seed=2, tree=tree)
    prior = float(true[sample].mean())
    est = estimate_output_lengths(w, sample, true[sample], prior, tree=tree)
    lexpos = np.empty(w.n, dtype=int)
    lexpos[tree.order] = np.arange(w.n)
    under_root = tree.parent[tree.n_internal + lexpos] == 0
    rest = np.setdiff1d(np.arange(w.n), sample)
    shared, loose = rest[~under_root[rest]], rest[under_root[rest]]
    mmlu = shared[w.max_tokens[shared] == 4]                  # MMLU (its max_tokens)
    assert len(mmlu) > 1000 and np.abs(est[mmlu] - true[mmlu]).mean() < 1.0
    assert len(loose) > 100 and np.all(est[loose] == np.minimum(prior, w.max_tokens[loose]))
    long = loose[true[loose] > 5000]                          # OpenVid: indistinguishable without a marker
    assert len(long) and np.all(est[long] < 0.1 * true[long])


def test_effective_lengths_carry_the_expected_kv_reads_of_a_heavy_tailed_subtree():
    """Mem is convex in d: a subtree's mean length understates its KV reads; d_eff keeps E[p d + d^2/2]."""
    w = _families([40, 40], max_tokens=20_000)              # prompt length 4 everywhere
    fam = w.tokens[w.offsets[:-1]]
    sampled = np.array([0, 1, 2, 3, 40, 41])
    observed = np.array([10.0, 10.0, 10.0, 10_000.0, 50.0, 50.0])
    d = effective_output_lengths(w, sampled, observed)
    assert d[sampled].tolist() == observed.tolist()          # sampled keep their results
    heavy = np.setdiff1d(np.flatnonzero(fam == 0), sampled)
    p, mean, square = 4.0, observed[:4].mean(), np.mean(observed[:4] ** 2)
    assert np.allclose(p * d[heavy] + d[heavy] ** 2 / 2, p * mean + square / 2)
    assert np.all(d[heavy] > 1.9 * mean)                     # at the mean (2507.5): a quarter of the KV reads
    even = np.setdiff1d(np.flatnonzero(fam == 1), sampled)
    assert np.allclose(d[even], 50.0)                        # constant samples: the mean itself
    capped = effective_output_lengths(Workload.from_lists([[0, 0, 0, 1000 + i] for i in range(40)] + [[1, 1, 1, 7]],
                                                          max_tokens=[20_000] * 40 + [100]),
                                      np.array([0, 1]), np.array([10.0, 10_000.0]))
    assert capped[40] == 100.0 and capped[5] <= 20_000      # the prior covers family 1, capped by its max_tokens
    no_sample = effective_output_lengths(w, np.zeros(0, dtype=np.int64), np.zeros(0))
    assert np.all(no_sample == 256.0)


def test_effective_lengths_let_the_planner_see_the_memory_a_few_long_outputs_hide():
    """Trace 4 (no dataset marker): the 1% sample catches a few of the 0.2% 16K-token generations. With mean
    lengths the planner took the workload for compute-bound (rho(root) ~10x the truth); with effective lengths
    its density is within a factor 2 of the truth, so the blend has memory-dense work to balance."""
    from blendserve.planner import HARDWARE, MODELS, plan
    from blendserve.simulator import workloads

    model, hw = MODELS["llama-3.1-8b"], HARDWARE["a100-80gb"]
    w = workloads.generate("trace4", 30_000, seed=2, model=model, hw=hw)
    true = w.output_len
    tree = PrefixTree.build(w)
    sample = warmup_sample(w, 0.01, seed=2, tree=tree)
    assert (true[sample] > 5000).sum() >= 1
    mean = estimate_output_lengths(w, sample, true[sample], float(true[sample].mean()), tree=tree)
    eff = effective_output_lengths(w, sample, true[sample], tree=tree)
    rho = {name: plan(Workload(w.tokens, w.offsets, w.max_tokens, d), model, hw).stats["rho_root"]
           for name, d in (("true", true), ("mean", mean), ("eff", eff))}
    assert rho["mean"] > 4 * rho["true"], rho
    assert rho["true"] / 2 < rho["eff"] < 2 * rho["true"], rho


def test_strata_keep_a_few_long_samples_from_lifting_the_short_bound_requests():
    """Short chats (max_tokens 1024) and a few long generations (max_tokens 20,000) under one root, no shared
    prefix: with the long-bound samples apart, the chats' lengths come from the chats' samples alone and the
    long ones' from the long samples; without, every chat is lifted to its cap by two 16K samples."""
    n_short, n_long = 300, 6
    w = Workload.from_lists([[5000 + i, 7] for i in range(n_short + n_long)], [1024] * n_short + [20_000] * n_long)
    sampled = np.array([3, 100, 200, n_short, n_short + 1])
    observed = np.array([20.0, 30.0, 40.0, 16_000.0, 15_000.0])
    tail = w.max_tokens >= 2000
    plain = effective_output_lengths(w, sampled, observed)
    split = effective_output_lengths(w, sampled, observed, strata=tail)
    short = np.setdiff1d(np.arange(n_short), sampled)
    assert np.all(plain[short] == 1024.0)
    p, d = 2.0, observed[:3]
    assert np.allclose(p * split[short] + split[short] ** 2 / 2, np.mean(p * d + d * d / 2))
    long = np.arange(n_short + 2, n_short + n_long)
    assert np.all((split[long] > 15_000) & (split[long] < 16_000))
    assert split[sampled].tolist() == observed.tolist()
    lone = effective_output_lengths(w, sampled[:3], observed[:3], strata=tail)     # no long sample: all samples
    assert np.allclose(lone, effective_output_lengths(w, sampled[:3], observed[:3]))


def test_the_rest_of_a_trace_is_estimated_near_its_truth_whatever_long_outputs_the_sample_caught():
    """Trace 1 (no dataset marker): seeds whose 1% sample caught one 16K-token generation. Without strata that
    one sample lifted every unshared short request's effective length (17-22x the rest's true decode tokens);
    with the long-bound samples apart (plan.tail_threshold), the rest stays within 1.7x of its truth."""
    from blendserve.planner import HARDWARE, MODELS, tail_threshold
    from blendserve.simulator import workloads

    model, hw = MODELS["llama-3.1-8b"], HARDWARE["a100-80gb"]
    w = workloads.generate("trace1", 30_000, seed=0, model=model, hw=hw)
    true = w.output_len
    tree = PrefixTree.build(w)
    for seed in (2, 3, 4):
        s = warmup_sample(w, 0.01, seed=seed, tree=tree)
        assert (true[s] > 5000).sum() >= 1
        first = effective_output_lengths(w, s, true[s], tree=tree)
        tail = np.maximum(w.max_tokens, first) >= tail_threshold(Workload(w.tokens, w.offsets, w.max_tokens, first))
        split = effective_output_lengths(w, s, true[s], tree=tree, strata=tail)
        rest = ~tail
        assert first[rest].sum() > 10 * true[rest].sum()
        assert 0.9 * true[rest].sum() < split[rest].sum() < 1.7 * true[rest].sum()
        assert 0.7 < split[tail].mean() / true[tail].mean() < 1.3


def test_a_cap_is_loose_only_where_enough_of_its_samples_stay_short():
    """Per max_tokens value: >= MIN_CAP_SAMPLES samples, under LONG_SHARE of them at the threshold or more."""
    caps = np.array([4096] * 100 + [20000] * 50 + [8192] * 40 + [2048] * 30 + [1024] * 10)
    sampled_caps = np.array([4096] * 20 + [20000] * 5 + [8192] * 4 + [2048] * 10 + [512] * 9)
    observed = np.array([300.0] * 19 + [3000.0]              # 1 of 20 long: loose
                        + [16000.0] * 5                       # a captioning job's cap: a bound
                        + [100.0] * 4                         # too few samples to tell
                        + [50.0] * 7 + [2500.0] * 3           # 3 of 10 long: a bound
                        + [10.0] * 9)                         # another cap's samples (history only)
    loose = loose_caps(caps, sampled_caps, observed, threshold=2000.0)
    assert loose.dtype == bool and len(loose) == len(caps)
    assert loose[:100].all()
    assert not loose[100:].any()                              # 20000, 8192, 2048, and 1024 with no sample
    assert not loose_caps(caps, sampled_caps[:0], observed[:0], 2000.0).any()
