"""Dual scan: a permutation made of two DFS streams, each within its memory share."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from blendserve.planner import perf
from blendserve.planner.dualscan import dual_scan

from .strategies import GPU, MODEL


@st.composite
def sequences(draw):
    n = draw(st.integers(1, 300))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    p = rng.integers(1, 3000, n).astype(float)
    d = rng.choice([1.0, 2.0, 50.0, 500.0, 16000.0], n)
    comp, mem = perf.comp_time(p, d, MODEL, GPU), perf.mem_time(p, d, MODEL, GPU)
    rho = perf.density(comp, mem)
    order = np.argsort(-rho, kind="stable")            # compute-dense first, as the planner lays leaves out
    shared = np.zeros(n)
    kv = perf.kv_bytes_held(p, d, MODEL)
    capacity = draw(st.sampled_from([2e9, 20e9, 60e9]))
    rho_t = float(perf.density(comp.sum(), mem.sum()))
    return comp[order], mem[order], p[order], shared, kv[order], (d + p / 2048)[order], capacity, rho_t


@settings(max_examples=60, deadline=None)
@given(sequences())
def test_scan_is_two_monotone_streams_within_their_shares(args):
    comp, mem, p, shared, kv, life, capacity, rho_t = args
    r = dual_scan(comp, mem, p, shared, kv, life, capacity, rho_t)
    n = len(kv)
    assert sorted(r.order.tolist()) == list(range(n))
    left, right = r.order[r.side == 0], r.order[r.side == 1]
    assert np.all(np.diff(left) == 1) and np.all(np.diff(right) == -1)   # each cursor walks in DFS order
    if len(left) and len(right):
        assert left.max() < right.min()                                  # the cursors meet once
    # each admission fits its side's share, except a side's sole request
    assert np.all((r.held <= r.share * (1 + 1e-9)) | r.alone)
    assert np.all(r.share <= capacity * (1 + 1e-9))
    assert np.all(~r.alone | np.isclose(r.held, kv[r.order]))


def test_a_blend_interleaves_both_sides_from_the_start():
    # 200 short compute-dense requests and 20 long memory-dense ones
    p = np.array([800.0] * 200 + [100.0] * 20)
    d = np.array([2.0] * 200 + [8000.0] * 20)
    comp, mem = perf.comp_time(p, d, MODEL, GPU), perf.mem_time(p, d, MODEL, GPU)
    rho_t = float(perf.density(comp.sum(), mem.sum()))
    r = dual_scan(comp, mem, p, np.zeros(220), perf.kv_bytes_held(p, d, MODEL), d + p / 2048, 60e9, rho_t)
    first = r.side[:len(r.side) // 4]
    assert 0 < first.sum() < len(first)      # the first quarter already holds both kinds
