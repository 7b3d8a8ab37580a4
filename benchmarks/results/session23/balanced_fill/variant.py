import sys, numpy as np
sys.path.insert(0, '/work/main'); sys.path.insert(0, '/tmp/t15/eng')
import engine_probe as ep
import scheduler.simulator.runner as R
R.simulate = ep.simulate
from scheduler.planner import HARDWARE, MODELS
from scheduler.simulator import workloads
name = sys.argv[1]
m, h = MODELS["llama-3.1-8b"], HARDWARE["a100-80gb"]
cfg = ep.EngineConfig(step_fill='balanced')
w = workloads.generate(name, 100000, seed=0, model=m, hw=h)
run = R.run_workload(name, w, m, h, ['fcfs', 'dfs', 'balance', 'blendserve'], cfg)
fr = {p: run.optimum.seconds / pr.result.seconds for p, pr in run.runs.items()}
print(ep.VARIANT or 'base', name, ' '.join(f"{p} {v:.3f}" for p, v in fr.items()), 'bs/best', round(fr['blendserve'] / max(fr['fcfs'], fr['dfs'], fr['balance']), 3))
