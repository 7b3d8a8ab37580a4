"""Which output bounds are the tail, with the tail measured against the compute clock (plan._tail_steps)?

For each 100K trace (seeds 0 and 2) and grid cell (seed 0), as runner._blendserve_estimated plans it: the
estimator's threshold (plan.tail_threshold, on the first estimate) and the planner's own (TAIL_SHARE x
stats["tail_steps"], on the stratified estimates), and the bounds (4, 1,024 or 20,000 in the generator) at
or above each. Where both are the 20,000 bounds alone, the orders are those of the fewest-steps rule.
Usage: PYTHONPATH=. .venv/bin/python benchmarks/results/session20/compute_tail/tail_sets.py [REQUESTS [SEED,...]]
(with seeds: traces 1-4 at each of them, no grid cells)
"""
import sys

import numpy as np

from scheduler.planner import HARDWARE, MODELS, PrefixTree, Workload, effective_output_lengths, plan, \
    tail_threshold, warmup_sample
from scheduler.planner.plan import TAIL_SHARE
from scheduler.simulator import workloads
from scheduler.simulator.engine import EngineConfig, output_lengths

n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
model, hw = MODELS["llama-3.1-8b"], HARDWARE["a100-80gb"]
kvb = EngineConfig().capacity(model, hw) * model.kv_bytes_per_token
cells = [f"grid-r{r:.2f}-s{s:.2f}" for r in workloads.GRID_RHO for s in workloads.GRID_SHARING]
runs = [(t, 0) for t in ("trace1", "trace2", "trace3", "trace4")] + [(t, 2) for t in ("trace1", "trace4")] \
    + [(c, 0) for c in cells]
if len(sys.argv) > 2:
    runs = [(t, int(seed)) for seed in sys.argv[2].split(",") for t in ("trace1", "trace2", "trace3", "trace4")]
for name, seed in runs:
    w = workloads.generate(name, n, seed=seed, model=model, hw=hw)
    true = output_lengths(w).astype(float)
    tree = PrefixTree.build(w)
    sample = warmup_sample(w, 0.01, seed=seed, tree=tree)
    est = effective_output_lengths(w, sample, true[sample], tree=tree)
    t1 = tail_threshold(Workload(w.tokens, w.offsets, w.max_tokens, est))
    est = effective_output_lengths(w, sample, true[sample], tree=tree, strata=np.maximum(w.max_tokens, est) >= t1)
    st = plan(Workload(w.tokens, w.offsets, w.max_tokens, est), model, hw, "blendserve", kv_capacity_bytes=kvb).stats
    t2 = TAIL_SHARE * st.get("tail_steps", np.inf)
    longest = np.maximum(w.max_tokens, np.minimum(est, w.max_tokens))
    sets = [sorted(set(longest[longest >= t].astype(int).tolist())) for t in (t1, t2)]
    flag = "" if sets[0] == sets[1] == [20000] else "  <-- differs"
    print(f"{name} seed {seed}: estimator {t1:.0f} {sets[0]}, planner {t2:.0f} {sets[1]}{flag}", flush=True)
