"""Diagnosis on one grid cell: BlendServe variants (tail guard off; oracle lengths) vs the baselines."""
import sys
sys.path.insert(0, ".")
from scheduler.planner import HARDWARE, MODELS
from scheduler.planner import plan as plan_mod
pm = sys.modules["scheduler.planner.plan"]
from scheduler.simulator import workloads
from scheduler.simulator.engine import EngineConfig
from scheduler.simulator.runner import run_workload
name, overlap = sys.argv[1], sys.argv[2]
model, hw = MODELS["llama-3.1-8b"], HARDWARE["a100-80gb"]
cfg = EngineConfig(step_tokens=2048, max_running=1024, overlap=overlap)
w = workloads.generate(name, 100_000, seed=0, model=model, hw=hw)
for label, guard, lengths in (("guard off", False, "estimate"), ("oracle lengths", True, "oracle"), ("guard off, oracle", False, "oracle")):
    pm.TAIL_GUARD = guard
    j = run_workload(name, w, model, hw, ["blendserve"], cfg, seed=0, lengths=lengths).to_json()
    print(name, overlap, label, round(j["policies"]["blendserve"]["fraction_of_optimal"], 3), flush=True)
