"""short_finish's size scaled by M (M x perf.idle_step_tokens tokens per step of the window; 0: no finish,
1: the default, 13.4: W full 2048-token steps): BlendServe's simulated seconds on one file.
Usage: python ablation.py FILE.jsonl nanoflow/balanced,nanoflow/budget 0 1 13.4"""
import sys, numpy as np, importlib, pathlib
sys.path.insert(0, "/work/main")
from scheduler.simulator.cli import read_workload_file
from scheduler.simulator.runner import _blendserve_estimated
from scheduler.simulator.engine import EngineConfig, simulate
from scheduler.simulator.prefix import build_prefix_trie
from scheduler.planner.perf import MODELS, HARDWARE
P = importlib.import_module("scheduler.planner.plan")
orig = P.short_finish
w = read_workload_file(pathlib.Path(sys.argv[1]))
model, hw = MODELS["llama-3.1-8b"], HARDWARE["a100-80gb"]
trie = build_prefix_trie(w)
for cfgs in sys.argv[2].split(","):
    overlap, fill = cfgs.split("/")
    cfg = EngineConfig(overlap=overlap, step_fill=fill)
    kv = cfg.capacity(model, hw) * model.kv_bytes_per_token
    out = []
    base = None
    for m in [float(x) for x in sys.argv[3:]]:
        P.short_finish = lambda *a, _m=m: orig(*a[:-1], a[-1] * _m)
        o, _ = _blendserve_estimated(w, model, hw, kv, cfg, 0)
        s = simulate(w, o, model, hw, cfg, trie=trie).seconds
        base = base or s
        out.append(f"M={m}: {s:.1f} ({base / s:.4f})")
    print(pathlib.Path(sys.argv[1]).stem, overlap, fill, " | ".join(out), flush=True)
