"""BlendServe order vs DFS (prefix-sorted) and FCFS orders through the whole service, real SmolLM2 on the CPU engine.

The prefix-heavy mix of benchmarks/prefix_mix.py in file order (kinds and
subjects interleaved): MMLU-style 5-shot questions behind one ~900-token
prefix per subject with 1-2 token answers, long generations from short
prompts, and chat behind shared system prompts; the subjects' prefixes
together exceed the CPU engine's prefix cache (8K tokens). Same file, same
service, same engine; only BLENDSERVE_PLANNER changes (the three orders run
side by side in every repeat). Reports run-phase tokens/s (prompt +
completion, first claim to last result), the cached-token share, and
BlendServe's ratio to FCFS and to the better of DFS and FCFS, median over
repeats.

    PYTHONPATH=. .venv/bin/python benchmarks/service_blend_vs_fcfs.py --requests 160 --repeats 3
"""
from __future__ import annotations

import argparse
import json
import statistics

from benchmarks.harness import run_service
from benchmarks.prefix_mix import workload
from core.config import SMOLLM2, Settings
from core.served import model_paths


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=160)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--subjects", type=int, default=24, help="exam subjects (of MMLU's 57), one prefix each")
    ap.add_argument("--exams", type=float, default=0.7, help="share of exam questions; long generations 0.15")
    args = ap.parse_args()
    models = f"{SMOLLM2}={model_paths(Settings())[SMOLLM2]}"
    rows = workload(args.requests, args.seed, subjects=args.subjects, exams=args.exams)
    results = []
    for rep in range(args.repeats):
        one = {}
        for planner in ("fcfs", "dfs", "blendserve"):
            r = run_service(rows, models, BLENDSERVE_PLANNER=planner)
            one[planner] = {"run_tok_s": round(r.run_tok_s, 1), "cached_share": round(r.cached_share, 3),
                            "run_s": round(r.run_s, 1), "whole_s": round(r.whole_s, 1), "wait_s": round(r.wait_s, 2)}
        one["ratio"] = round(one["blendserve"]["run_tok_s"] / one["fcfs"]["run_tok_s"], 3)
        best = max(one["fcfs"]["run_tok_s"], one["dfs"]["run_tok_s"])
        one["ratio_vs_best_simple"] = round(one["blendserve"]["run_tok_s"] / best, 3)
        results.append(one)
        print(json.dumps(one), flush=True)
    med = {"median_ratio": statistics.median(r["ratio"] for r in results),
           "median_ratio_vs_best_simple": statistics.median(r["ratio_vs_best_simple"] for r in results)}
    for planner in ("fcfs", "dfs", "blendserve"):
        med[f"median_{planner}_tok_s"] = statistics.median(r[planner]["run_tok_s"] for r in results)
        med[f"median_{planner}_cached"] = statistics.median(r[planner]["cached_share"] for r in results)
    print(json.dumps(med))


if __name__ == "__main__":
    main()
