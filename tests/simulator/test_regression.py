"""Regression: on a small seeded blend the simulator shows BlendServe ahead of DFS and FCFS.

The workload is built so that blending is physically possible on the
simulated engine: compute-dense few-shot questions (shared prefixes) and
chat, plus 10% memory-dense generations of ~1000 tokens, each type opening
with its own template token so DFS runs the types one after another. The
engine runs 512-token steps, small enough that a step can overlap a full KV
read with its compute (see benchmarks/results/simulator.md: with 2048-token
steps and a full pool, compute saturates long before memory can).

Measured with planner a31e365, true lengths, seeds 1-3: BlendServe
0.613-0.645 of the optimum, FCFS 0.584-0.597, DFS 0.567-0.582 (seed 1, the
one asserted: +6.9% over FCFS, +9.1% over DFS); with the 1% warm-up
estimates BlendServe reaches 0.648-0.665. The asserted margin is 5%.
"""
from __future__ import annotations

import numpy as np

from scheduler.planner.workload import Workload
from scheduler.simulator.engine import EngineConfig
from scheduler.simulator.runner import run_workload
from tests.simulator.conftest import GPU, MODEL

MARGIN = 1.05


def _blend(n: int, seed: int) -> Workload:
    rng = np.random.default_rng(seed)
    fewshot = [np.concatenate([[1], rng.integers(10, 50_000, 700)]) for _ in range(20)]
    prompts, outs = [], []
    for u in rng.random(n):
        if u < 0.5:
            prompts.append(np.concatenate([fewshot[rng.integers(20)], rng.integers(10, 50_000, 100)]))
            outs.append(2)
        elif u < 0.9:
            prompts.append(np.concatenate([[2], rng.integers(10, 50_000, int(rng.integers(100, 400)))]))
            outs.append(int(rng.integers(10, 60)))
        else:
            prompts.append(np.concatenate([[3], rng.integers(10, 50_000, 100)]))
            outs.append(int(rng.integers(500, 1500)))
    return Workload.from_lists(prompts, 4096, outs)


def test_blendserve_beats_dfs_and_fcfs_by_a_margin():
    w = _blend(6000, seed=1)
    run = run_workload("regression", w, MODEL, GPU, ["fcfs", "dfs", "blendserve"],
                       EngineConfig(step_tokens=512, max_running=512), seed=1, lengths="oracle")
    tput = {name: r.result.tokens_per_s for name, r in run.runs.items()}
    assert tput["blendserve"] >= MARGIN * tput["dfs"], tput
    assert tput["blendserve"] >= MARGIN * tput["fcfs"], tput
    assert run.runs["blendserve"].result.sharing_ratio >= 0.97 * run.dfs_sharing
