"""Regression: on small seeded traces the simulator shows BlendServe ahead of every simple order.

Traces #1 and #3 (no dataset marker in any prompt), 6000 requests, 512-token
steps (small enough that a step can overlap a full KV read with its compute:
with 2048-token steps and a full pool compute saturates long before memory
can, and every order lands within 2%), true output lengths. DFS is the better
of its two directions (runner.run_workload), so BlendServe must beat the best
of FCFS, both DFS and Balance, not DFS's worst dataset order.

Measured (seed 1): trace1 BlendServe 0.753 of T*, best other 0.728 (FCFS);
trace3 0.776 vs 0.748 (FCFS): +3.5% and +3.8%. The asserted margin is 2%.
"""
from __future__ import annotations

import pytest

from blendserve.simulator import workloads
from blendserve.simulator.engine import EngineConfig
from blendserve.simulator.runner import run_workload
from tests.simulator.conftest import GPU, MODEL

MARGIN = 1.02


@pytest.mark.parametrize("trace", ["trace1", "trace3"])
def test_blendserve_beats_the_best_simple_order(trace):
    w = workloads.generate(trace, 6000, seed=1, model=MODEL, hw=GPU)
    run = run_workload(trace, w, MODEL, GPU, ["fcfs", "dfs", "balance", "blendserve"],
                       EngineConfig(step_tokens=512, max_running=512), seed=1, lengths="oracle")
    tput = {name: r.result.tokens_per_s for name, r in run.runs.items()}
    best = max(v for k, v in tput.items() if k != "blendserve")
    assert tput["blendserve"] >= MARGIN * best, tput
    assert run.runs["blendserve"].result.sharing_ratio >= 0.97 * run.dfs_sharing
    assert run.runs["dfs"].dfs_direction in ("ascending", "descending")


@pytest.mark.parametrize("trace", ["trace1", "trace4"])
def test_on_a_balanced_engine_blendserve_leads_at_the_default_budget(trace):
    """2048-token steps that take only what hides under their reads (EngineConfig.step_fill), BlendServe on
    the 1% warm-up sample and estimates. Measured (seed 0, 20K requests; BENCHMARKS.md, Planner):
    trace1 0.924 of T* against the best other order's 0.668 (Balance), trace4 0.935 against 0.732: the
    longest bounds start first and the rest runs under their decodes. Asserted: 1.15x and 0.85 of T*."""
    w = workloads.generate(trace, 20_000, seed=0, model=MODEL, hw=GPU)
    run = run_workload(trace, w, MODEL, GPU, ["fcfs", "dfs", "balance", "blendserve"],
                       EngineConfig(step_fill="balanced"), seed=0)
    tput = {name: r.result.tokens_per_s for name, r in run.runs.items()}
    best = max(v for k, v in tput.items() if k != "blendserve")
    assert tput["blendserve"] >= 1.15 * best, tput
    assert tput["blendserve"] >= 0.85 * run.optimum.tokens_per_s
