import sys
sys.path.insert(0, ".")
import numpy as np
from scheduler.planner import HARDWARE, MODELS, PrefixTree, Workload, effective_output_lengths, plan, warmup_sample
from scheduler.simulator import workloads
from scheduler.simulator.engine import EngineConfig
from scheduler.simulator.engine import output_lengths
pm = sys.modules["scheduler.planner.plan"]
name = sys.argv[1]
model, hw = MODELS["llama-3.1-8b"], HARDWARE["a100-80gb"]
cfg = EngineConfig(step_tokens=2048, max_running=1024)
w = workloads.generate(name, 100_000, seed=0, model=model, hw=hw)
true = output_lengths(w).astype(float)
sample = warmup_sample(w, 0.01)
est = effective_output_lengths(w, sample, true[sample])
kv = cfg.capacity(model, hw) * model.kv_bytes_per_token
long = true > 4000
print(name, "long requests", int(long.sum()), "est of long: mean", est[long].mean().round(), "est of short unshared-ish: median", np.median(est[~long]).round())
for guard in (True, False):
    pm.TAIL_GUARD = guard
    p = plan(Workload(w.tokens, w.offsets, w.max_tokens, est), model, hw, "blendserve", kv_capacity_bytes=kv, step_tokens=2048)
    pos = np.empty(w.n); pos[p.order] = np.arange(w.n) / w.n
    q = np.quantile(pos[long], [0, .25, .5, .75, 1])
    print("guard", guard, "fewest_steps", round(p.stats.get("fewest_steps", 0)), "rho_root", round(p.stats["rho_root"], 2), "long positions quantiles", q.round(2))
