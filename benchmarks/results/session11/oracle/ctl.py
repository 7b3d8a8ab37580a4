import sys, time, numpy as np
sys.path.insert(0,'.'); sys.path.insert(0,'/tmp/simx')
from collections import deque
from scheduler.planner import HARDWARE, MODELS, plan, Workload
from scheduler.simulator import workloads
from scheduler.simulator.engine import EngineConfig, output_lengths
import engine_oracle as eo
from scheduler.simulator.prefix import build_prefix_trie, dfs_sharing_ratio
from scheduler.simulator.optimum import optimum
model, hw = MODELS["llama-3.1-8b"], HARDWARE["a100-80gb"]
name = sys.argv[1]; n = int(sys.argv[2])
w = workloads.generate(name, n, seed=0, model=model, hw=hw)
cfg = EngineConfig()
trie = build_prefix_trie(w); s = dfs_sharing_ratio(w, trie)
opt = optimum(w, model, hw, s, cfg)
d = output_lengths(w); p = w.prompt_lens()
cap = cfg.capacity(model, hw)
truth = Workload(w.tokens, w.offsets, w.max_tokens, d.astype(float))
dfs = plan(truth, model, hw, "dfs").order
long = d > 2000
class Ctl:
    def __init__(self, S, L, theta, eng_ref):
        self.S = deque(int(x) for x in S); self.L = deque(int(x) for x in L)
        self.pre = deque(); self.theta = theta; self.eng = eng_ref; self.committed = []; self.dec = None; self.dec_clock = -1
        self.order = []
    def _peak_ok(self, now, extra):
        items = [(s0, pp, dd) for (s0, pp, dd) in self.committed if s0 + dd > now] + [extra]
        self.committed = items[:-1]
        ends = [s0 + dd - 1 for s0, pp, dd in items]
        peak = 0
        for t in ends:
            if t < now: continue
            kv = sum(pp + (t - s0) for s0, pp, dd in items if s0 <= t < s0 + dd)
            peak = max(peak, kv)
        return peak <= self.theta * cap
    def _choose(self):
        now = getattr(self.eng[0], 'clock_now', 0)
        if self.dec is not None and self.dec_clock == now: return self.dec
        if self.L and (not self.S or self._peak_ok(now, (now, p[self.L[0]], d[self.L[0]]))):
            self.dec = 'L'
        else:
            self.dec = 'S' if self.S else 'L'
        self.dec_clock = now
        return self.dec
    def __bool__(self): return bool(self.pre or self.S or self.L)
    def __len__(self): return len(self.pre)+len(self.S)+len(self.L)
    def __getitem__(self, i):
        assert i == 0
        if self.pre: return self.pre[0]
        return ((self.L if self._choose()=='L' else self.S)[0], 0)
    def popleft(self):
        if self.pre: return self.pre.popleft()
        c = self._choose(); q = self.L if c=='L' else self.S
        r = q.popleft(); self.order.append(r)
        if c == 'L':
            self.committed.append((self.eng[0].clock_now, p[r], d[r]))
        self.dec = None
        return (r, 0)
    def appendleft(self, x): self.pre.appendleft(x)
for theta in [float(x) for x in sys.argv[3].split(',')]:
    ref = [None]
    e = eo._Engine(w, dfs, model, hw, cfg, trie, None)
    ref[0] = e
    ctl = Ctl(dfs[~long[dfs]], dfs[long[dfs]], theta, ref)
    e.queue = ctl
    t = time.time(); r = e.run()
    print(f"theta {theta}: {r.tokens_per_s/opt.tokens_per_s:.3f} preempt {r.preemptions} steps {r.steps} secs {r.seconds:.0f} ({time.time()-t:.0f}s)", flush=True)
    np.save(f"/tmp/simx/ctl_order_{name}_{theta}.npy", np.array(ctl.order))
    if len(sys.argv) > 4:
        exec("def timeline"+open('/tmp/simx/oracle.py').read().split("def timeline")[1].split("import builtins")[0])
        timeline(r, 30)
        # longs admitted over time: starts
        st = sorted(c[0] for c in ctl.committed)
