"""An engine's step cost in the simulator's terms, fitted over its measured steps (benchmarks/sim_vs_engine.py).

The terms: fixed + per token + per KV position a decode reads + per prefill attention pair c (s + c/2) + per
decoding sequence + per chunk after a cached prefix. Non-negative least squares, so every cost is one the
simulator can charge; the time between two steps (the engine's scheduler, outside the timed forward passes)
goes into the fixed term as its mean per step.
"""
from __future__ import annotations

import numpy as np

TERMS = ("fixed", "per_token", "per_position", "per_pair", "per_sequence", "per_cached_chunk")


def features(shape: dict) -> list[float]:
    """Each term's value in a step of this shape: decodes, KV positions read, prefill chunks (start, length)."""
    prefill = shape["prefill"]
    return [1.0, shape["decodes"] + sum(n for _, n in prefill), shape["decode_positions"],
            sum(n * (s + n / 2) for s, n in prefill), shape["decodes"], sum(1 for s, _ in prefill if s > 0)]


def nnls(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0: drop the most negative term and refit until none is."""
    keep = list(range(X.shape[1]))
    while True:
        coef = np.linalg.lstsq(X[:, keep], y, rcond=None)[0]
        if (coef >= 0).all():
            out = np.zeros(X.shape[1])
            out[keep] = coef
            return out
        keep.pop(int(np.argmin(coef)))


def fit(step_runs: list[dict]) -> dict[str, float]:
    """Step-cost coefficients from measured runs; the between-steps time goes into the fixed term."""
    X = np.array([features(s) for run in step_runs for _, s in run["steps"]])
    y = np.array([t for run in step_runs for t, _ in run["steps"]])
    coef = dict(zip(TERMS, (float(c) for c in nnls(X, y))))
    gap = sum(run["seconds"] - sum(t for t, _ in run["steps"]) for run in step_runs)
    coef["between_steps"] = gap / len(y)
    coef["fixed"] += coef["between_steps"]
    return coef
