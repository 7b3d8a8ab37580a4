"""Optimum and engine bound (blendserve.simulator.optimum) of Traces #1-#4 for given step budgets.

Usage: .venv/bin/python benchmarks/sim_bounds.py [--requests 400000] [--step-tokens 2048,512]
The engine bound is the most any order can reach on the simulated engine; a
policy's tokens/s over it isolates the ordering loss from engine physics.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from blendserve.planner import HARDWARE, MODELS  # noqa: E402
from blendserve.simulator import workloads  # noqa: E402
from blendserve.simulator.engine import EngineConfig  # noqa: E402
from blendserve.simulator.optimum import engine_bound, optimum  # noqa: E402
from blendserve.simulator.prefix import dfs_sharing_ratio  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", default="trace1,trace2,trace3,trace4")
    ap.add_argument("--requests", type=int, default=400_000)
    ap.add_argument("--step-tokens", default="2048,512")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    model, hw = MODELS["llama-3.1-8b"], HARDWARE["a100-80gb"]
    budgets = [int(x) for x in args.step_tokens.split(",")]
    print("| workload | optimum tokens/s | " + " | ".join(f"engine bound @{b} (of optimum)" for b in budgets) + " |")
    print("|" + "---|" * (len(budgets) + 2))
    for name in args.workloads.split(","):
        w = workloads.generate(name, args.requests, seed=args.seed, model=model, hw=hw)
        s = dfs_sharing_ratio(w)
        opt = optimum(w, model, hw, s).tokens_per_s
        cells = []
        for b in budgets:
            bound = engine_bound(w, model, hw, s, EngineConfig(step_tokens=b, max_running=min(b, 1024))).tokens_per_s
            cells.append(f"{bound:,.0f} ({bound / opt:.3f})")
        print(f"| {name} | {opt:,.0f} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
