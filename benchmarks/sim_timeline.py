"""Where a simulated run loses time: utilisation, decoding requests and tokens per step over the run, per policy.

Usage: PYTHONPATH=. .venv/bin/python benchmarks/sim_timeline.py [--workload trace1] [--requests 100000]
       [--step-tokens 2048] [--overlap nanoflow] [--lengths estimate|oracle] [--bins 30]
       [--policies dfs,blendserve]
For each policy: its fraction of T*, then one row per time bin with the
compute and memory utilisation (fractions of peak FLOP/s and bandwidth),
the requests decoding (time-weighted) and the tokens computed per second. A run that alternates compute-only
and memory-only bins overlaps nothing, whatever its order.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from blendserve.planner import HARDWARE, MODELS  # noqa: E402
from blendserve.simulator import workloads  # noqa: E402
from blendserve.simulator.engine import EngineConfig, SimResult  # noqa: E402
from blendserve.simulator.runner import run_workload  # noqa: E402


def rows(r: SimResult, model, hw, bins: int) -> list[dict]:
    """Time-weighted figures per bin of the run (a timeline entry is one step or a jump of decode steps)."""
    tl = r.timeline
    tok_s = 2.0 * model.params / hw.flops
    end = float(tl.start[-1] + tl.duration[-1])
    edges = np.linspace(0.0, end, bins + 1)
    idx = np.clip(np.searchsorted(edges, tl.start, side="right") - 1, 0, bins - 1)
    dur = np.maximum(np.bincount(idx, tl.duration, bins), 1e-12)
    comp = np.bincount(idx, tl.comp, bins)
    return [{"t0": float(edges[b]), "t1": float(edges[b + 1]), "compute": float(comp[b] / dur[b]),
             "memory": float(np.bincount(idx, tl.mem, bins)[b] / dur[b]),
             "decoding": float(np.bincount(idx, tl.decoding * tl.duration, bins)[b] / dur[b]),
             "tokens_per_s": float(comp[b] / tok_s / dur[b])} for b in range(bins)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="trace1")
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--step-tokens", type=int, default=EngineConfig.step_tokens)
    ap.add_argument("--overlap", default=EngineConfig.overlap)
    ap.add_argument("--lengths", default="estimate")
    ap.add_argument("--policies", default="dfs,blendserve")
    ap.add_argument("--bins", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    model, hw = MODELS["llama-3.1-8b"], HARDWARE["a100-80gb"]
    config = EngineConfig(step_tokens=args.step_tokens, max_running=min(1024, args.step_tokens), overlap=args.overlap)
    w = workloads.generate(args.workload, args.requests, seed=args.seed, model=model, hw=hw)
    run = run_workload(args.workload, w, model, hw, args.policies.split(","), config, seed=args.seed,
                       lengths=args.lengths)
    print(f"{args.workload}, {args.requests} requests, {args.step_tokens}-token steps, {args.overlap}, "
          f"lengths {args.lengths}; T* {run.optimum.seconds:.0f} s, KV pool {config.capacity(model, hw)} tokens")
    for name, pr in run.runs.items():
        r = pr.result
        print(f"\n{name}: {r.tokens_per_s / run.optimum.tokens_per_s:.3f} of T*, {r.seconds:.0f} s, {r.steps} steps, "
              f"{r.preemptions} preemptions")
        print("| seconds | compute | memory | decoding | tokens / s |")
        print("|---|---|---|---|---|")
        for row in rows(r, model, hw, args.bins):
            print(f"| {row['t0']:.0f}-{row['t1']:.0f} | {row['compute']:.2f} | {row['memory']:.2f} | "
                  f"{row['decoding']:.0f} | {row['tokens_per_s']:.0f} |")


if __name__ == "__main__":
    main()
