"""The step-cost fit (tests/harness/step_fit.py) recovers the costs that made the steps, in the simulator's terms."""
from __future__ import annotations

import numpy as np
import pytest

from tests.harness.step_fit import TERMS, features, fit, nnls


def _steps(costs: dict[str, float], n: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        decodes = int(rng.integers(0, 200))
        prefill = [[int(rng.integers(0, 800)), int(rng.integers(2, 400))] for _ in range(int(rng.integers(0, 3)))]
        shape = {"decodes": decodes, "decode_positions": decodes * int(rng.integers(50, 900)), "prefill": prefill}
        t = sum(c * f for c, f in zip((costs[k] for k in TERMS), features(shape)))
        out.append([t, shape])
    return out


def test_fit_recovers_the_costs_and_adds_the_time_between_steps():
    costs = dict(fixed=0.02, per_token=8e-4, per_position=4e-6, per_pair=9e-7, per_sequence=5e-5,
                 per_cached_chunk=3e-3)
    steps = _steps(costs, 400, seed=1)
    run = {"db": "x", "order": "plan", "seconds": sum(t for t, _ in steps) + 400 * 0.0005, "steps": steps}
    got = fit([run])
    assert got["between_steps"] == pytest.approx(0.0005)
    assert got["fixed"] == pytest.approx(0.02 + 0.0005, rel=1e-6)
    for k in TERMS[1:]:
        assert got[k] == pytest.approx(costs[k], rel=1e-6)


def test_nnls_drops_a_term_that_would_fit_negative():
    rng = np.random.default_rng(2)
    X = np.column_stack([np.ones(50), rng.random(50), rng.random(50)])
    y = 1.0 + 2.0 * X[:, 1] - 0.5 * X[:, 2]       # the third term can only be fitted negative
    coef = nnls(X, y)
    assert (coef >= 0).all() and coef[2] == 0.0
    assert coef[1] > 0
