"""Shared small workloads for the simulator tests."""
from __future__ import annotations

import numpy as np
import pytest

from blendserve.planner.perf import HARDWARE, MODELS
from blendserve.planner.workload import Workload

MODEL = MODELS["llama-3.1-8b"]
GPU = HARDWARE["a100-80gb"]


def shared_prefix_workload(n: int, seed: int, *, long_out: float = 0.02, groups: int = 8) -> Workload:
    """A mix of few-shot-like requests behind shared prefixes, chat-like ones and a few long generations."""
    rng = np.random.default_rng(seed)
    prefixes = [rng.integers(0, 50_000, int(rng.integers(200, 600))) for _ in range(groups)]
    prompts, outs = [], []
    for _ in range(n):
        u = rng.random()
        if u < 0.4:
            prompts.append(np.concatenate([prefixes[rng.integers(groups)], rng.integers(0, 50_000, 60)]))
            outs.append(2)
        elif u < 0.4 + long_out:
            prompts.append(rng.integers(0, 50_000, 100))
            outs.append(int(rng.integers(1500, 3000)))
        else:
            prompts.append(rng.integers(0, 50_000, int(rng.integers(20, 400))))
            outs.append(int(rng.integers(1, 200)))
    return Workload.from_lists(prompts, 4096, outs)


@pytest.fixture(scope="session")
def small_workload() -> Workload:
    return shared_prefix_workload(1500, seed=1)
