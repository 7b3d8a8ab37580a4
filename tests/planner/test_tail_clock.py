"""engine_clock_tail: the long-bound tail and the rest merged on the engine's two clocks (plan.py)."""
import sys

import numpy as np
import pytest

from blendserve.planner import HARDWARE, MODELS, plan
from blendserve.planner.tail import engine_clock_tail
from blendserve.planner.workload import Workload
from blendserve.simulator.engine import EngineConfig, simulate


def _three_tail_four_rest():
    """Requests 0-3: the rest, 30 fresh tokens each (30 compute steps at a 1-token budget, R = 120);
    4-6: the tail, bound 100, no fresh tokens: 5,000 token-steps each, 50 steps of a 100-token pool.
    The first one's peak (100 tokens) fits the empty pool, so the stagger runs from it: the tail starts
    at 0, 0, 50 on the pool clock and ends at T = 150."""
    order = np.array([0, 4, 1, 5, 2, 6, 3])              # the scan's order
    fresh = np.array([30.0] * 4 + [0.0] * 3)
    d = np.zeros(7)
    longest = np.array([5.0] * 4 + [100.0] * 3)
    return order, fresh, d, longest


def test_compute_bound_lays_the_rest_at_the_end_on_its_own_clock():
    order, fresh, d, longest = _three_tail_four_rest()
    out = engine_clock_tail(order, fresh, d, longest, pool_tokens=100.0, step_tokens=1, run_steps=100.0,
                            stretch=False)
    # rest at T - R + its clock: 30, 60, 90, 120; tail at 0, 0, 50
    assert out.tolist() == [4, 5, 0, 6, 1, 2, 3]


def test_compute_bound_rest_shorter_than_the_drain_puts_the_whole_tail_first():
    order, fresh, d, longest = _three_tail_four_rest()
    out = engine_clock_tail(order, fresh / 10.0, d, longest, 100.0, 1, 100.0, stretch=False)
    assert out.tolist() == [4, 5, 6, 0, 1, 2, 3]          # R = 12 steps: all of it inside the tail's last 100


def test_memory_bound_stretches_the_rest_over_the_tails_window():
    order, fresh, d, longest = _three_tail_four_rest()
    out = engine_clock_tail(order, fresh, d, longest, 100.0, 1, 100.0, stretch=True)
    # rest stretched by T / R = 150 / 120: 0, 37.5, 75, 112.5; on a tie the tail request goes first
    assert out.tolist() == [4, 5, 0, 1, 6, 2, 3]
    # scale-free: the rest's proportions are what counts when its estimates carry the tail's memory
    assert engine_clock_tail(order, fresh * 0.5, d, longest, 100.0, 1, 100.0, True).tolist() == out.tolist()


def test_a_tail_whose_peaks_fit_the_empty_pool_starts_at_once():
    """20 generations of up to 1,000 tokens (peaks 1,010) in a 25,000-token pool: all start at step 0, ahead
    of the rest. In a 10,000-token pool the first 9 do (9,090 tokens), then one every 10,050 token-steps."""
    n_tail, n_rest = 20, 100
    order = np.arange(n_tail + n_rest)
    fresh = np.full(n_tail + n_rest, 10.0)
    d = np.full(n_tail + n_rest, 5.0)
    longest = np.array([1000.0] * n_tail + [5.0] * n_rest)
    out = engine_clock_tail(order[::-1].copy(), fresh, d, longest, 25_000.0, 10, 1000.0, stretch=True)
    assert sorted(out[:n_tail].tolist()) == list(range(n_tail))
    out = engine_clock_tail(order[::-1].copy(), fresh, d, longest, 10_000.0, 10, 1000.0, stretch=True)
    assert sorted(out[:9].tolist()) == list(range(11, 20))        # LPT ties keep the scan's order: 19, 18, ...
    assert not np.isin(out[9:12], np.arange(n_tail)).all()        # the rest runs between the staggered starts


def test_only_bounds_of_a_tenth_of_the_run_are_the_tail_and_both_streams_keep_their_order():
    order, fresh, d, longest = _three_tail_four_rest()
    assert engine_clock_tail(order, fresh, d, longest, 100.0, 1, 1001.0, False).tolist() == order.tolist()
    rng = np.random.default_rng(0)
    n = 500
    order = rng.permutation(n)
    longest = np.where(rng.random(n) < 0.05, 20_000.0, 64.0)
    out = engine_clock_tail(order, rng.integers(1, 500, n).astype(float), rng.integers(1, 64, n).astype(float),
                            longest, 4e5, 2048, 5e4, bool(rng.integers(2)))
    assert sorted(out.tolist()) == list(range(n))
    tail = longest[out] > 1000
    assert out[tail].tolist() == [r for r in order.tolist() if longest[r] > 1000]
    assert out[~tail].tolist() == [r for r in order.tolist() if longest[r] <= 1000]


def test_a_tail_the_estimates_miss_does_not_decode_alone_at_the_end():
    """Long generations hide among short chats (same prompt shapes, every estimate short), as the OpenVid
    requests do in the grid when the warm-up sample misses them. With compute-bound estimates the placement
    starts the tail first, so the chats run while it drains. Simulated on one engine with the true lengths,
    that must beat the tail left to the end (what a late tail costs) and not lose to the scan's own order."""
    model, hw = MODELS["llama-3.1-8b"], HARDWARE["a100-80gb"]
    rng = np.random.default_rng(1)
    n_long, n_short = 24, 6000
    prompts = [list(rng.integers(0, 100_000, int(rng.integers(80, 300)))) for _ in range(n_long + n_short)]
    true = np.concatenate([np.full(n_long, 6000.0), rng.integers(4, 60, n_short).astype(float)])
    mx = np.concatenate([np.full(n_long, 8000), np.full(n_short, 128)])
    perm = rng.permutation(n_long + n_short)
    prompts = [prompts[i] for i in perm]
    true, mx = true[perm], mx[perm]
    estimate = Workload.from_lists(prompts, mx, np.full(len(prompts), 30.0))    # the sample saw no long one
    truth = Workload.from_lists(prompts, mx, true)
    cfg = EngineConfig(step_tokens=512, max_running=512, kv_capacity_tokens=60_000)
    kv = cfg.capacity(model, hw) * model.kv_bytes_per_token
    placed = plan(estimate, model, hw, kv_capacity_bytes=kv, step_tokens=512).order
    with pytest.MonkeyPatch.context() as mp:          # the scan's own order: no tail placement
        mp.setattr(sys.modules["blendserve.planner.plan"], "engine_clock_tail", lambda order, *a, **k: order)
        unplaced = plan(estimate, model, hw, kv_capacity_bytes=kv, step_tokens=512).order
    long_pos = np.flatnonzero(true[placed] > 1000)
    assert long_pos.max() < n_long                       # compute-bound estimates: the whole tail first
    is_long = true[unplaced] > 1000
    tail_last = np.concatenate([unplaced[~is_long], unplaced[is_long]])
    t_placed, t_unplaced, t_last = (simulate(truth, o, model, hw, cfg).seconds for o in (placed, unplaced, tail_last))
    assert t_placed < 0.9 * t_last
    assert t_placed <= 1.02 * t_unplaced


def test_the_longest_bounds_start_first_and_equal_bounds_keep_their_order():
    """Longest processing time first: a request that may decode 20K steps cannot wait behind chats of 1K
    (a 20K-request trace whose warm-up sample saw no long output counts the chats' 1,024-token bounds as tail
    too; in the scan's order the 20K ones came last and the run ended with them decoding alone)."""
    order = np.array([0, 1, 2, 3, 4, 5])
    longest = np.array([1024.0, 1024.0, 20_000.0, 1024.0, 20_000.0, 5.0])
    out = engine_clock_tail(order, np.full(6, 10.0), np.ones(6), longest, pool_tokens=1e9, step_tokens=2048,
                            run_steps=1000.0, stretch=False)
    tail = [r for r in out.tolist() if longest[r] > 100]
    assert tail == [2, 4, 0, 1, 3]
