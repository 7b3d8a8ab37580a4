"""The 65-workload sensitivity grid: BlendServe over the best of FCFS, DFS and Balance per (rho, sharing) cell.

Usage: .venv/bin/python benchmarks/sim_grid.py [--requests 50000] [--step-tokens 2048]
       [--overlap nanoflow|sequential] [--step-fill budget|balanced] [--lengths estimate|oracle] [--json out.json]
       [--cells RHO:S,RHO:S,...] [--rows out.jsonl] [--baselines earlier.jsonl]
--baselines ROWS.jsonl takes FCFS, DFS and Balance from an earlier --rows file where it has the
cell (same requests, step budget, overlap, step fill and seed; the baselines' orders do not depend on the
planner) and simulates only BlendServe there: ratios are of fractions of the same T*.
--cells runs only those cells (a run that cannot afford all 65 at the verdict size);
--rows appends each cell's row as one JSON line as soon as it finishes, so a run
stopped at a deadline keeps what it measured.
Prints a rho x sharing markdown matrix of BlendServe / best other (DFS in its better
direction), then the mean, median and range of that and of BlendServe / DFS, and the
mean fraction of T* per policy.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from blendserve.planner import HARDWARE, MODELS  # noqa: E402
from blendserve.simulator import workloads  # noqa: E402
from blendserve.simulator.engine import EngineConfig  # noqa: E402
from blendserve.simulator.runner import run_workload  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=50_000)
    ap.add_argument("--step-tokens", type=int, default=EngineConfig.step_tokens)
    ap.add_argument("--overlap", default=EngineConfig.overlap)
    ap.add_argument("--step-fill", default=EngineConfig.step_fill)
    ap.add_argument("--lengths", default="estimate")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--cells", default="", help="RHO:S,... (default: all 65)")
    ap.add_argument("--rows", type=Path, help="append one JSON line per finished cell")
    ap.add_argument("--baselines", type=Path, help="earlier rows whose FCFS/DFS/Balance fractions are reused")
    args = ap.parse_args()
    earlier = _earlier_baselines(args.baselines, args) if args.baselines else {}
    model, hw = MODELS["llama-3.1-8b"], HARDWARE["a100-80gb"]
    config = EngineConfig(step_tokens=args.step_tokens, max_running=min(1024, args.step_tokens),
                          overlap=args.overlap, step_fill=args.step_fill)
    policies = ["fcfs", "dfs", "balance", "blendserve"]
    cells: dict[tuple[float, float], dict] = {}
    t_all = time.perf_counter()
    wanted = {tuple(round(float(x), 2) for x in c.split(":")) for c in args.cells.split(",") if c}
    grid = [(rho, s) for rho in workloads.GRID_RHO for s in workloads.GRID_SHARING if not wanted or (rho, s) in wanted]
    for rho, s in grid:
        t0 = time.perf_counter()
        name = f"grid-r{rho:.2f}-s{s:.2f}"
        w = workloads.generate(name, args.requests, seed=args.seed, model=model, hw=hw)
        run = ["blendserve"] if name in earlier else policies
        j = run_workload(name, w, model, hw, run, config, seed=args.seed, lengths=args.lengths).to_json()
        p = j["policies"]
        for x, frac in earlier.get(name, {}).items():
            p[x] = {"fraction_of_optimal": frac, "tokens_per_s": frac * j["optimal_tokens_per_s"], "reused": True}
        j["ratio_dfs"] = p["blendserve"]["tokens_per_s"] / p["dfs"]["tokens_per_s"]
        j["ratio"] = p["blendserve"]["tokens_per_s"] / max(p[x]["tokens_per_s"] for x in policies[:-1])
        cells[(rho, s)] = j
        if args.rows:
            with args.rows.open("a") as f:
                f.write(json.dumps({"workload": name, "rho": rho, "sharing": s, "requests": args.requests,
                                    "step_tokens": args.step_tokens, "overlap": args.overlap,
                                    "step_fill": args.step_fill,
                                    "seed": args.seed, "ratio": j["ratio"], "ratio_dfs": j["ratio_dfs"],
                                    "fraction_of_optimal": {x: p[x]["fraction_of_optimal"] for x in policies},
                                    "baselines_from": str(args.baselines) if name in earlier else None,
                                    "wall_s": round(time.perf_counter() - t0, 1)}) + "\n")
        print(f"{name}: BlendServe/best other {j['ratio']:.3f}, /DFS {j['ratio_dfs']:.3f}; of T* "
              + ", ".join(f"{x} {p[x]['fraction_of_optimal']:.3f}" for x in policies), file=sys.stderr, flush=True)
    ratios = [c["ratio"] for c in cells.values()]
    ratios_dfs = [c["ratio_dfs"] for c in cells.values()]
    print(f"overlap {args.overlap}, {args.step_tokens}-token steps ({args.step_fill} fill), {args.requests} requests; "
          "BlendServe / best other:")
    print("| rho \\ sharing | " + " | ".join(f"{s:.2f}" for s in workloads.GRID_SHARING) + " |")
    print("|" + "---|" * (len(workloads.GRID_SHARING) + 1))
    for rho in workloads.GRID_RHO:
        print(f"| {rho:.2f} | " + " | ".join(f"{cells[(rho, s)]['ratio']:.3f}" if (rho, s) in cells else "-"
                                            for s in workloads.GRID_SHARING) + " |")
    frac = {x: statistics.mean(c["policies"][x]["fraction_of_optimal"] for c in cells.values()) for x in policies}
    for label, rs in (("best other", ratios), ("DFS", ratios_dfs)):
        print(f"\nBlendServe / {label} over {len(rs)} workloads: mean {statistics.mean(rs):.3f}, median "
              f"{statistics.median(rs):.3f}, min {min(rs):.3f}, max {max(rs):.3f}")
    print("mean fraction of T*: " + ", ".join(f"{x} {v:.3f}" for x, v in frac.items())
          + f"; wall {time.perf_counter() - t_all:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)},
                                         "workloads": list(cells.values())}, indent=1))


def _earlier_baselines(path: Path, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """workload -> {fcfs, dfs, balance: fraction of T*} from rows measured with the same settings."""
    out = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if (r["requests"], r["step_tokens"], r["overlap"], r.get("step_fill", "budget"), r["seed"]) == \
                (args.requests, args.step_tokens, args.overlap, args.step_fill, args.seed):
            out[r["workload"]] = {x: r["fraction_of_optimal"][x] for x in ("fcfs", "dfs", "balance")}
    return out


if __name__ == "__main__":
    main()
