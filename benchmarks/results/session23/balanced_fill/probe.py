import sys, numpy as np
sys.path.insert(0, '/work/main'); sys.path.insert(0, '/tmp/t15/eng')
import engine_probe as ep
import scheduler.simulator.runner as R
R.simulate = ep.simulate
from scheduler.planner import HARDWARE, MODELS
from scheduler.simulator import workloads
name, fill, pol = sys.argv[1], sys.argv[2], sys.argv[3]
m, h = MODELS["llama-3.1-8b"], HARDWARE["a100-80gb"]
cfg = ep.EngineConfig(step_fill=fill)
w = workloads.generate(name, 100000, seed=0, model=m, hw=h)
run = R.run_workload(name, w, m, h, [pol], cfg)
cap = cfg.capacity(m, h)
a = np.array(ep.PREF, dtype=np.float64)
k = a[:, 0]
tot = k.sum()
print(name, fill, pol, 'steps', tot, 'frac', run.optimum.seconds / run.runs[pol].result.seconds)
names = ['prefill_total_tokens', 'prefill_left', 'resident_cache', 'decoder_private', 'n_dec', 'kv_read', 'chunk', 'blocked', 'queue']
for i, nm in enumerate(names):
    print(f"  {nm:22s} step-weighted mean {np.sum(a[:, i+1]*k)/tot:12.0f}  /pool {np.sum(a[:, i+1]*k)/tot/cap:.3f}")
# decode-only steps vs steps with prefill
pre = a[:, 7] > 0
print('  steps with prefill', k[pre].sum()/tot, ' kv_read/pool in those', np.sum(a[pre,6]*k[pre])/k[pre].sum()/cap, ' decode-only', np.sum(a[~pre,6]*k[~pre])/k[~pre].sum()/cap)
