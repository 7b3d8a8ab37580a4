"""The 65-workload sensitivity grid: BlendServe / DFS throughput per (rho, sharing) cell and the mean.

Usage: .venv/bin/python benchmarks/sim_grid.py [--requests 50000] [--step-tokens 2048]
       [--lengths estimate|oracle] [--json out.json]
Prints a rho x sharing markdown matrix of BlendServe / DFS and the mean, median and range.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.planner import HARDWARE, MODELS  # noqa: E402
from scheduler.simulator import workloads  # noqa: E402
from scheduler.simulator.engine import EngineConfig  # noqa: E402
from scheduler.simulator.runner import run_workload  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=50_000)
    ap.add_argument("--step-tokens", type=int, default=2048)
    ap.add_argument("--lengths", default="estimate")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    model, hw = MODELS["llama-3.1-8b"], HARDWARE["a100-80gb"]
    config = EngineConfig(step_tokens=args.step_tokens, max_running=min(1024, args.step_tokens))
    cells: dict[tuple[float, float], dict] = {}
    t_all = time.perf_counter()
    for rho in workloads.GRID_RHO:
        for s in workloads.GRID_SHARING:
            name = f"grid-r{rho:.2f}-s{s:.2f}"
            w = workloads.generate(name, args.requests, seed=args.seed, model=model, hw=hw)
            j = run_workload(name, w, model, hw, ["dfs", "blendserve"], config, seed=args.seed,
                             lengths=args.lengths).to_json()
            p = j["policies"]
            j["ratio"] = p["blendserve"]["tokens_per_s"] / p["dfs"]["tokens_per_s"]
            cells[(rho, s)] = j
            print(f"{name}: BlendServe/DFS {j['ratio']:.3f}  BlendServe {p['blendserve']['fraction_of_optimal']:.3f}"
                  f"  DFS {p['dfs']['fraction_of_optimal']:.3f} of optimum", file=sys.stderr, flush=True)
    ratios = [c["ratio"] for c in cells.values()]
    print("| rho \\ sharing | " + " | ".join(f"{s:.2f}" for s in workloads.GRID_SHARING) + " |")
    print("|" + "---|" * (len(workloads.GRID_SHARING) + 1))
    for rho in workloads.GRID_RHO:
        print(f"| {rho:.2f} | " + " | ".join(f"{cells[(rho, s)]['ratio']:.3f}" for s in workloads.GRID_SHARING) + " |")
    bs = [c["policies"]["blendserve"]["fraction_of_optimal"] for c in cells.values()]
    dfs = [c["policies"]["dfs"]["fraction_of_optimal"] for c in cells.values()]
    print(f"\nBlendServe / DFS over {len(ratios)} workloads: mean {statistics.mean(ratios):.3f}, median "
          f"{statistics.median(ratios):.3f}, min {min(ratios):.3f}, max {max(ratios):.3f}; "
          f"mean fraction of optimum BlendServe {statistics.mean(bs):.3f}, DFS {statistics.mean(dfs):.3f}; "
          f"wall {time.perf_counter() - t_all:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)},
                                         "workloads": list(cells.values())}, indent=1))


if __name__ == "__main__":
    main()
