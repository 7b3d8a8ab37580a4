import sys, time, numpy as np
sys.path.insert(0,'.')
from scheduler.planner import HARDWARE, MODELS, plan, Workload
from scheduler.simulator import workloads
from scheduler.simulator.engine import EngineConfig, output_lengths, simulate
from scheduler.simulator.prefix import build_prefix_trie, dfs_sharing_ratio
from scheduler.simulator.optimum import optimum
model, hw = MODELS["llama-3.1-8b"], HARDWARE["a100-80gb"]
name = sys.argv[1]; n = int(sys.argv[2])
w = workloads.generate(name, n, seed=0, model=model, hw=hw)
cfg = EngineConfig()
trie = build_prefix_trie(w); s = dfs_sharing_ratio(w, trie)
opt = optimum(w, model, hw, s, cfg)
d = output_lengths(w)
truth = Workload(w.tokens, w.offsets, w.max_tokens, d.astype(float))
def run(order, label):
    t=time.time(); r = simulate(w, order, model, hw, cfg, trie=trie)
    print(f"{label}: {r.tokens_per_s/opt.tokens_per_s:.3f} preempt {r.preemptions} steps {r.steps} ({time.time()-t:.1f}s)", flush=True)
    return r
dfs = plan(truth, model, hw, "dfs").order
run(dfs, "dfs")
bs = plan(truth, model, hw, "blendserve", kv_capacity_bytes=cfg.capacity(model,hw)*model.kv_bytes_per_token).order
run(bs, "blendserve oracle lengths")
long = d > 2000
L = dfs[long[dfs]]; S = dfs[~long[dfs]]
for a in (1.0, 1.5, 2.0):
  for end in (0.5, 0.7, 0.9):
    x = (np.arange(len(L))/len(L))**a * end
    pos = (x*len(S)).astype(int)
    key = np.concatenate([np.arange(len(S)), pos - 0.5])
    order = np.concatenate([S, L])[np.argsort(key, kind='stable')]
    run(order, f"long at (j/N)^{a}*{end}")

def timeline(r, bins=30):
    tl = r.timeline
    w_s = model.weight_bytes()/hw.bandwidth; kv_s = model.kv_bytes_per_token/hw.bandwidth
    k = np.maximum(1, np.rint((tl.comp/ (2*model.params/hw.flops)) / np.maximum(tl.decoding,1)).astype(int))
    end = tl.start[-1]+tl.duration[-1]
    edges = np.linspace(0,end,bins+1)
    idx = np.clip(np.searchsorted(edges, tl.start, side='right')-1,0,bins-1)
    dur = np.bincount(idx, tl.duration, bins)
    tok = np.bincount(idx, tl.comp, bins)/ (2*model.params/hw.flops)
    nsteps = np.bincount(idx, np.ones(len(tl.start)), bins)
    comp = np.bincount(idx, tl.comp, bins)/dur
    mem = np.bincount(idx, tl.mem, bins)/dur
    dec = np.bincount(idx, tl.decoding*tl.duration, bins)/dur
    for b in range(bins):
        print(f"  t {edges[b]:6.0f}-{edges[b+1]:6.0f} comp {comp[b]:.2f} mem {mem[b]:.2f} dec {dec[b]:6.0f} tokens/s {tok[b]/dur[b]:8.0f}")
import builtins
