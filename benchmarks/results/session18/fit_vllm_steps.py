"""Least-squares fit of vLLM's step seconds over traced runs (benchmarks/vllm_engine_orders.py --steps):
what a step's cost is made of, pooled and per order, and what each order spends per term.

    .venv/bin/python benchmarks/results/session18/fit_vllm_steps.py benchmarks/results/session18/vllm_steps2.jsonl
"""
import json
import sys

import numpy as np

NAMES = ["fixed", "decodes", "decode_positions", "prefill_tokens", "prefill_requests"]
rows = [json.loads(line) for line in open(sys.argv[1])]


def features(steps):
    s = np.array(steps, dtype=np.float64)
    dt, cr, ct, gr, pos, model = s.T
    return np.stack([np.ones_like(dt), gr, pos, ct, cr], 1), dt, model


def fit(X, y):
    c, *_ = np.linalg.lstsq(X, y, rcond=None)
    return c, 1 - ((X @ c - y) ** 2).sum() / ((y - y.mean()) ** 2).sum()


for col, label in ((1, "frontend seconds between outputs"), (2, "model seconds (vLLM's iteration elapsed)")):
    print(f"== {label}")
    parts = [features(r["steps"]) for r in rows]
    X = np.concatenate([p[0] for p in parts])
    y = np.concatenate([p[col] for p in parts])
    c, r2 = fit(X, y)
    print("pooled fit, ms per:", dict(zip(NAMES, np.round(c * 1000, 4))), "R^2", round(r2, 4))
    for r, (Xi, *ys) in zip(rows, parts):
        yi = ys[col - 1]
        ci, r2i = fit(Xi, yi)
        print(f"  {r['order']:5s} {yi.sum():6.1f}s steps {len(yi)} totals",
              dict(zip(NAMES, np.round(Xi.sum(0)).astype(int).tolist())),
              "\n        pooled fit predicts", round(float((Xi @ c).sum()), 1),
              "by term", dict(zip(NAMES, np.round(Xi.sum(0) * c, 1).tolist())),
              "\n        own fit ms per", dict(zip(NAMES, np.round(ci * 1000, 4).tolist())), "R^2", round(r2i, 4))

# What any order could save on this engine (sequential overlap: nothing hides the KV reads). Every order
# computes the same tokens and reads the same KV positions (same cache hits), so only the fixed cost of the
# steps depends on the order; the fewest steps are max(decodes / running cap, tokens / step budget, longest):
# the worker's vLLM defaults (64 running, 4096-token steps) and chatheavy's longest output (256).
print("== the ceiling of any order's gain (pooled frontend fit)")
parts = [features(r["steps"]) for r in rows]
X = np.concatenate([p[0] for p in parts])
c, _ = fit(X, np.concatenate([p[1] for p in parts]))
for r, (Xi, dt, _) in zip(rows, parts):
    decodes, tokens = Xi[:, 1].sum(), Xi[:, 1].sum() + Xi[:, 3].sum()
    fewest = max(decodes / 64, tokens / 4096, 256)
    saving = c[0] * (len(Xi) - fewest)
    kv = c[2] * Xi[:, 2].sum()
    print(f"  {r['order']:5s} {dt.sum():6.1f}s: {len(Xi)} steps, fewest {fewest:.0f}; fixed cost of the extra steps "
          f"{saving:.1f}s ({saving / dt.sum():.1%}); KV-read term {kv:.1f}s ({kv / dt.sum():.1%})")
