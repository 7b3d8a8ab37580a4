"""A hardware profile's fixed costs (the CPU engine's per-step and per-sequence Python) in the simulated step."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from blendserve.planner.perf import HardwareProfile
from blendserve.planner.workload import Workload
from blendserve.simulator.engine import EngineConfig, simulate
from tests.simulator.conftest import GPU, MODEL, shared_prefix_workload


@pytest.mark.parametrize("overlap", ["sequential", "nanoflow"])
def test_fixed_costs_add_per_step_and_per_decoded_token(overlap):
    w = shared_prefix_workload(300, seed=3)
    config = EngineConfig(step_tokens=512, max_running=128, overlap=overlap)
    base = simulate(w, np.arange(w.n), MODEL, GPU, config)
    costly = dataclasses.replace(GPU, step_overhead=0.004, seq_overhead=0.0002)
    r = simulate(w, np.arange(w.n), MODEL, costly, config)
    assert r.steps == base.steps and r.output_tokens == base.output_tokens   # same schedule, slower steps
    # every step pays the step cost once, every decoding sequence in it once: one per output token
    expected = base.seconds + 0.004 * base.steps + 0.0002 * base.output_tokens
    assert r.seconds == pytest.approx(expected, rel=1e-9)


def test_weight_reads_can_have_their_own_bandwidth():
    w = shared_prefix_workload(200, seed=4)
    config = EngineConfig(overlap="sequential")
    slow = simulate(w, np.arange(w.n), MODEL, dataclasses.replace(GPU, weight_bandwidth=GPU.bandwidth / 10), config)
    same = simulate(w, np.arange(w.n), MODEL, dataclasses.replace(GPU, weight_bandwidth=None), config)
    hidden = simulate(w, np.arange(w.n), MODEL, dataclasses.replace(GPU, weight_bandwidth=math.inf), config)
    assert same.seconds == simulate(w, np.arange(w.n), MODEL, GPU, config).seconds
    assert hidden.seconds < same.seconds < slow.seconds


def _prompts_workload(prompts: list[list[int]], out: int = 4) -> Workload:
    return Workload.from_lists([np.array(p) for p in prompts], 4096, [out] * len(prompts))


def test_prefill_attention_counts_each_chunk_over_its_context():
    rng = np.random.default_rng(5)
    prompts = [[int(i)] + rng.integers(1, 50_000, int(rng.integers(50, 400))).tolist() for i in range(40)]
    w = _prompts_workload(prompts)                     # distinct first tokens: nothing cached, one chunk each
    hw = dataclasses.replace(GPU, weight_bandwidth=math.inf)   # sequential steps are then additive in compute
    config = EngineConfig(step_tokens=4096, overlap="sequential")
    base = simulate(w, np.arange(w.n), MODEL, hw, config)
    r = simulate(w, np.arange(w.n), MODEL, dataclasses.replace(hw, prefill_attention=True), config)
    p = w.prompt_lens().astype(float)
    attention = 4.0 * MODEL.q_dim * MODEL.layers / GPU.flops * float((p * p / 2).sum())
    assert r.seconds - base.seconds == pytest.approx(attention / config.efficiency, rel=1e-6)


def test_chunk_overhead_is_paid_by_chunks_after_a_cached_prefix():
    prefix = list(range(1000, 1100))
    w = _prompts_workload([prefix + [5000 + i] * 10 for i in range(20)])
    config = EngineConfig(step_tokens=4096)
    base = simulate(w, np.arange(w.n), MODEL, GPU, config)
    r = simulate(w, np.arange(w.n), MODEL, dataclasses.replace(GPU, chunk_overhead=0.01), config)
    assert base.sharing_ratio > 0.8
    assert r.seconds - base.seconds == pytest.approx(0.01 * 19)   # all but the first read the cached prefix


def test_attention_can_have_its_own_flop_rate():
    rng = np.random.default_rng(6)
    prompts = [[int(i)] + rng.integers(1, 50_000, int(rng.integers(50, 400))).tolist() for i in range(40)]
    w = _prompts_workload(prompts)
    hw = dataclasses.replace(GPU, weight_bandwidth=math.inf, prefill_attention=True)
    config = EngineConfig(step_tokens=4096, overlap="sequential")
    none = simulate(w, np.arange(w.n), MODEL, dataclasses.replace(hw, prefill_attention=False), config).seconds
    same = simulate(w, np.arange(w.n), MODEL, hw, config).seconds
    slow = simulate(w, np.arange(w.n), MODEL, dataclasses.replace(hw, attention_flops=GPU.flops / 5), config).seconds
    assert simulate(w, np.arange(w.n), MODEL, dataclasses.replace(hw, attention_flops=GPU.flops),
                    config).seconds == same
    assert slow - none == pytest.approx(5 * (same - none), rel=1e-9)   # only the attention term is 5x slower


def test_a_profile_from_step_costs_prices_each_step_by_its_terms():
    """Two requests, one after a cached prefix: every step's cost is the fit's terms, added up by hand."""
    prefix = list(range(1000, 1100))
    w = Workload.from_lists([np.array(prefix + [7] * 20), np.array(prefix + [8] * 30)], 16, [3, 2])
    costs = dict(fixed=0.01, per_token=4e-4, per_position=2e-6, per_pair=5e-7, per_sequence=3e-5,
                 per_cached_chunk=2e-3)
    hw = HardwareProfile.from_step_costs("fit", MODEL, **costs)
    config = EngineConfig(step_tokens=64, max_running=8, overlap="sequential", efficiency=1.0,
                          kv_capacity_tokens=10_000)
    r = simulate(w, np.arange(2), MODEL, hw, config)

    def step(tokens, positions=0, decodes=0, chunks=(), cached=0):
        pairs = sum(c * (s + c / 2) for s, c in chunks)
        return (costs["fixed"] + costs["per_token"] * tokens + costs["per_position"] * positions
                + costs["per_pair"] * pairs + costs["per_sequence"] * decodes + costs["per_cached_chunk"] * cached)

    # A: 120 prompt tokens in chunks of 64 and 56; B finds A's 100-token prefix cached (the cache holds
    # it from A's admission) and computes its 30 in chunks of 8 and 22; each then runs its d decode
    # steps, the i-th reading p + i positions
    expected = (step(64, chunks=[(0, 64)])
                + step(64, chunks=[(64, 56), (100, 8)], cached=2)
                + step(23, positions=121, decodes=1, chunks=[(108, 22)], cached=1)
                + step(2, positions=122 + 131, decodes=2)
                + step(2, positions=123 + 132, decodes=2))
    assert r.steps == 5 and r.output_tokens == 5
    assert r.seconds == pytest.approx(expected, rel=1e-9)
