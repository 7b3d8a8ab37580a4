"""The planner's two clocks per grid cell: the rest's compute steps R and the tail's pool steps (bounds), from
the same estimates BlendServe plans with. Usage: tail_clocks.py CELL[,CELL...]"""
import sys
sys.path.insert(0, ".")
import numpy as np
import scheduler.planner.plan  # noqa: F401
pm = sys.modules["scheduler.planner.plan"]
from scheduler.planner import HARDWARE, MODELS
from scheduler.simulator import workloads
from scheduler.simulator.engine import EngineConfig
from scheduler.simulator import runner

model, hw = MODELS["llama-3.1-8b"], HARDWARE["a100-80gb"]
cfg = EngineConfig(step_tokens=2048, max_running=1024)
seen = {}
orig = pm.engine_clock_tail
def spy(order, fresh, d, longest, kv_tokens, step_tokens, fewest, stretch):
    is_tail = longest[order] >= pm.TAIL_SHARE * fewest
    tail, rest = order[is_tail], order[~is_tail]
    lt = longest[tail]
    area = fresh[tail] * lt + lt * lt / 2.0
    starts = (np.cumsum(area) - area) / kv_tokens
    r = float(((fresh[rest] + d[rest]) / step_tokens).sum())
    seen.update(n_tail=int(is_tail.sum()), R=r, S_last=float(starts[-1]), end=float(np.max(starts + lt)), fewest=fewest)
    seen["stretch"] = stretch
    return orig(order, fresh, d, longest, kv_tokens, step_tokens, fewest, stretch=stretch)
pm.engine_clock_tail = spy
pm.TAIL_PLACEMENT = "engine_clock"
for cell in sys.argv[1].split(","):
    name = f"grid-r{cell.replace(':', '-s')}"
    w = workloads.generate(name, 100_000, seed=0, model=model, hw=hw)
    runner._blendserve_estimated(w, model, hw, cfg.capacity(model, hw) * model.kv_bytes_per_token, cfg, 0)
    print(name, {k: round(v, 3) if isinstance(v, float) else v for k, v in seen.items()},
          f"R/S_last {seen['R'] / seen['S_last']:.3f} R/end {seen['R'] / seen['end']:.3f}", flush=True)
