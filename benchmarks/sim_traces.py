"""Traces #1-#4 (or any presets): every policy's fraction of T*, the engine bound, and BlendServe / best other.

Usage: .venv/bin/python benchmarks/sim_traces.py [--requests 400000] [--step-tokens 2048]
       [--overlap nanoflow|sequential] [--step-fill budget|balanced] [--lengths estimate|oracle] [--lead-tokens 0]
       [--workloads trace1,trace2,trace3,trace4] [--json out.json]
Prints one markdown table row per workload (FCFS, DFS (the better direction),
Balance and BlendServe, each as a fraction of T*; the engine bound as a
fraction of T*; BlendServe over DFS and over the best of the others);
--json also writes every figure.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from blendserve.planner import HARDWARE, MODELS, POLICIES  # noqa: E402
from blendserve.simulator import workloads  # noqa: E402
from blendserve.simulator.engine import EngineConfig  # noqa: E402
from blendserve.simulator.runner import run_workload  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", default="trace1,trace2,trace3,trace4")
    ap.add_argument("--requests", type=int, default=400_000)
    ap.add_argument("--step-tokens", type=int, default=EngineConfig.step_tokens)
    ap.add_argument("--overlap", default=EngineConfig.overlap)
    ap.add_argument("--step-fill", default=EngineConfig.step_fill)
    ap.add_argument("--lead-tokens", type=int, default=0)
    ap.add_argument("--lengths", default="estimate")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    model, hw = MODELS["llama-3.1-8b"], HARDWARE["a100-80gb"]
    config = EngineConfig(step_tokens=args.step_tokens, max_running=min(1024, args.step_tokens),
                          overlap=args.overlap, step_fill=args.step_fill)
    policies = args.policies.split(",")
    names = [n for spec in args.workloads.split(",") for n in workloads.expand(spec)]
    print(f"overlap {args.overlap}, {args.step_tokens}-token steps ({args.step_fill} fill), {args.requests} requests, "
          f"seed {args.seed}, lengths {args.lengths}, "
          f"lead tokens {args.lead_tokens}")
    print("| workload | rho | s_DFS | " + " | ".join(f"{p} of T*" for p in policies)
          + " | bound of T* | BlendServe sharing / DFS | BlendServe / DFS | BlendServe / best other | wall s |")
    print("|" + "---|" * (len(policies) + 8))
    rows = []
    for name in names:
        t0 = time.perf_counter()
        w = workloads.generate(name, args.requests, seed=args.seed, model=model, hw=hw, lead=args.lead_tokens)
        run = run_workload(name, w, model, hw, policies, config, seed=args.seed, lengths=args.lengths)
        j = run.to_json()
        j["wall_seconds"] = time.perf_counter() - t0
        rows.append(j)
        pol = j["policies"]
        ratio = (pol["blendserve"]["tokens_per_s"] / pol["dfs"]["tokens_per_s"]
                 if "blendserve" in pol and "dfs" in pol else float("nan"))
        others = [pol[p]["tokens_per_s"] for p in pol if p != "blendserve"]
        vs_best = pol["blendserve"]["tokens_per_s"] / max(others) if "blendserve" in pol and others else float("nan")
        bs_share = pol["blendserve"]["sharing_vs_dfs"] if "blendserve" in pol else float("nan")
        dfs_dir = f" ({pol['dfs']['dfs_direction'][:4]})" if "dfs" in pol else ""
        print(f"| {name} | {j['density']:.3f} | {j['dfs_sharing_ratio']:.3f} | "
              + " | ".join(f"{pol[p]['fraction_of_optimal']:.3f}" + (dfs_dir if p == "dfs" else "") for p in policies)
              + f" | {j['engine_bound_tokens_per_s'] / j['optimal_tokens_per_s']:.3f}"
              + f" | {bs_share:.3f} | {ratio:.3f} | {vs_best:.3f} | {j['wall_seconds']:.0f} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "workloads": rows}, indent=1))


if __name__ == "__main__":
    main()
