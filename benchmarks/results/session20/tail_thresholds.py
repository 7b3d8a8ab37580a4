"""Is the tail (plan.tail_threshold) exactly the 20K-bound requests in every 100K grid cell and trace?

Then starting the tail longest bound first (session 20) changes no budget-fill order at 100K, and the
budget-fill figures of sessions 13-17 stand. Prints per workload and seed the threshold and the bounds
at or above it, as runner._blendserve_estimated computes them.
Usage: PYTHONPATH=. .venv/bin/python benchmarks/results/session20/tail_thresholds.py [SEED ...]
"""
import sys

import numpy as np

from scheduler.planner import HARDWARE, MODELS, PrefixTree, Workload, effective_output_lengths, tail_threshold, \
    warmup_sample
from scheduler.simulator import workloads
from scheduler.simulator.engine import EngineConfig, output_lengths

model, hw = MODELS["llama-3.1-8b"], HARDWARE["a100-80gb"]
kvb = EngineConfig().capacity(model, hw) * model.kv_bytes_per_token
names = [f"grid-r{r:.2f}-s{s:.2f}" for r in workloads.GRID_RHO for s in workloads.GRID_SHARING]
for seed in [int(a) for a in sys.argv[1:]] or [0]:
    for name in ["trace1", "trace2", "trace3", "trace4"] + (names if seed == 0 else []):
        w = workloads.generate(name, 100_000, seed=seed, model=model, hw=hw)
        true = output_lengths(w).astype(float)
        tree = PrefixTree.build(w)
        sample = warmup_sample(w, 0.01, seed=seed, tree=tree)
        est = effective_output_lengths(w, sample, true[sample], tree=tree)
        bound = tail_threshold(Workload(w.tokens, w.offsets, w.max_tokens, est))
        bounds = sorted(set(np.maximum(w.max_tokens, est)[np.maximum(w.max_tokens, est) >= bound].astype(int).tolist()))
        print(f"{name} seed {seed}: threshold {bound:.0f}, tail bounds {bounds[:5]}{' ...' if len(bounds) > 5 else ''}",
              flush=True)
