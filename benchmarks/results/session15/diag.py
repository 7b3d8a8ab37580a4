"""Where BlendServe loses on one grid cell, in numbers: steps, preemptions, and how the run's time splits
into compute-bound steps (the short requests running) and memory-bound ones (the tail decoding alone),
with the KV pool's occupancy in each. Usage: diag.py CELL OVERLAP POLICY[,POLICY...]"""
import sys
sys.path.insert(0, ".")
import numpy as np
from scheduler.planner import HARDWARE, MODELS
from scheduler.simulator import workloads
from scheduler.simulator.engine import EngineConfig
from scheduler.simulator.runner import run_workload

name, overlap, policies = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
model, hw = MODELS["llama-3.1-8b"], HARDWARE["a100-80gb"]
cfg = EngineConfig(step_tokens=2048, max_running=1024, overlap=overlap)
w = workloads.generate(name, 100_000, seed=0, model=model, hw=hw)
run = run_workload(name, w, model, hw, policies, cfg, seed=0)
cap = cfg.capacity(model, hw)
tail = w.max_tokens >= 20000
print(f"{name} {overlap}: T* {run.optimum.seconds:.0f} s; tail {int(tail.sum())} requests; pool {cap} tokens")
for pol, pr in run.runs.items():
    r = pr.result
    tl = r.timeline
    n_steps = np.ones(len(tl.start))  # jumps count k steps; recover k from weights reads: mem - kv >= k W/B
    cb = tl.comp >= tl.mem
    occ = tl.kv_tokens / cap
    t = tl.duration
    def wmean(x, m):
        return float((x[m] * t[m]).sum() / max(t[m].sum(), 1e-12))
    end = tl.start[-1] + t[-1]
    last_cb = float(tl.start[cb][-1]) if cb.any() else 0.0
    print(f"{pol}: {r.tokens_per_s / run.optimum.tokens_per_s:.3f} of T*, {r.seconds:.0f} s, {r.steps} steps, "
          f"{r.preemptions} preemptions, {r.recomputed_tokens} recomputed tokens | compute-bound {t[cb].sum():.0f} s "
          f"(pool {wmean(occ, cb):.2f} full), memory-bound {t[~cb].sum():.0f} s (pool {wmean(occ, ~cb):.2f} full, "
          f"{wmean(tl.decoding.astype(float), ~cb):.0f} decoding); last compute-bound step at {last_cb:.0f} s of {end:.0f}")
    q = np.linspace(0, 1, 11)
    edges = np.quantile(np.arange(len(t)), q)
    ts = [f"{float(tl.start[int(i)]):.0f}" for i in edges[:-1]]
    # time-binned occupancy and compute share in 10 equal time bins
    bins = np.linspace(0, end, 11)
    idx = np.clip(np.searchsorted(bins, tl.start, side="right") - 1, 0, 9)
    dur = np.bincount(idx, t, 10)
    print("   bins (10 of the run): compute util " + " ".join(f"{x:.2f}" for x in np.bincount(idx, tl.comp, 10) / dur)
          + " | pool " + " ".join(f"{x:.2f}" for x in np.bincount(idx, occ * t, 10) / dur), flush=True)
