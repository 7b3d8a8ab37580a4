"""BlendServe under tail-placement variants on chosen grid cells, against the FCFS/DFS/Balance fractions of
earlier rows (same requests, steps, overlap, seed). Usage: variants.py OVERLAP BASELINES.jsonl ROWS.jsonl
CELL[,CELL..] MODE[,...] [SEED]   (MODE: guard = main's tail_guard, auto = engine_clock_tail; the session's
earlier modes end / start / spread / spread_end ran from an experimental plan.py, see README.md)"""
import json
import sys
import time
sys.path.insert(0, ".")
from scheduler.planner import HARDWARE, MODELS
import scheduler.planner.plan  # noqa: F401
pm = sys.modules["scheduler.planner.plan"]
from scheduler.simulator import workloads
from scheduler.simulator.engine import EngineConfig
from scheduler.simulator.runner import run_workload

overlap, base_path, out_path, cells, modes = sys.argv[1:6]
seed = int(sys.argv[6]) if len(sys.argv) > 6 else 0
model, hw = MODELS["llama-3.1-8b"], HARDWARE["a100-80gb"]
cfg = EngineConfig(step_tokens=2048, max_running=1024, overlap=overlap)
base = {}
for line in open(base_path):
    r = json.loads(line)
    if r["overlap"] == overlap and r["seed"] == seed:
        base[r["workload"]] = r["fraction_of_optimal"]
for cell in cells.split(","):
    name = cell if cell.startswith("grid") or cell.startswith("trace") else f"grid-r{cell.replace(':', '-s')}"
    w = workloads.generate(name, 100_000, seed=seed, model=model, hw=hw)
    for m in modes.split(","):
        pm.TAIL_PLACEMENT = "engine_clock" if m == "auto" else "guard"
        t0 = time.perf_counter()
        j = run_workload(name, w, model, hw, ["blendserve"], cfg, seed=seed).to_json()
        b = j["policies"]["blendserve"]
        f = b["fraction_of_optimal"]
        best = max(base[name][x] for x in ("fcfs", "dfs", "balance"))
        row = {"workload": name, "overlap": overlap, "seed": seed, "variant": m, "blendserve": f,
               "ratio": f / best, "ratio_dfs": f / base[name]["dfs"], "preemptions": b["preemptions"],
               "wall_s": round(time.perf_counter() - t0, 1)}
        with open(out_path, "a") as fh:
            fh.write(json.dumps(row) + "\n")
        print(f"{name} {overlap} {m}: {f:.3f} of T*, {row['ratio']:.3f}x best other, preemptions {b['preemptions']}",
              flush=True)
