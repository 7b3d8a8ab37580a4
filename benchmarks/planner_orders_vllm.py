"""BlendServe vs DFS vs FCFS through the whole service on the vLLM engine: one file, three orders side by side.

The file is benchmarks/prefix_mix.py's (as in vllm_vs_run_batch.py: exam
questions behind one ~900-token 5-shot prefix per subject, long generations,
chat behind shared system prompts, interleaved). Each repeat runs the three
orders in turn on a fresh deployment (fresh engine, empty prefix cache); only
BLENDSERVE_PLANNER changes. The cache is the engine's default
(VLLM_CPU_KVCACHE_SPACE, --kv-gib) unless --num-blocks shrinks it; --subjects
sets how far the prefixes exceed it (57 subjects x ~900 tokens = 51K tokens,
more than a 1 GiB CPU cache's ~46K). Prints run-phase tokens/s per order and
BlendServe over the better of DFS and FCFS, per repeat and as medians.

    LD_PRELOAD=/work/main/.venv-vllm/lib/libiomp5.so PYTHONPATH=. /work/main/.venv-vllm/bin/python \
        -m benchmarks.planner_orders_vllm --requests 200 --subjects 57 --kv-gib 1 --repeats 3
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path

from benchmarks.prefix_mix import workload
from benchmarks.vllm_vs_run_batch import run_service
from core.config import SMOLLM2, Settings
from core.served import model_paths

ORDERS = ("fcfs", "dfs", "blendserve")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--subjects", type=int, default=57)
    ap.add_argument("--kv-gib", type=int, default=int(os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")))
    ap.add_argument("--num-blocks", type=int, default=None)
    ap.add_argument("--json", type=Path, help="append every run's figures to this file")
    args = ap.parse_args()
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(args.kv_gib)
    if args.num_blocks:
        os.environ["BLENDSERVE_VLLM_NUM_BLOCKS"] = str(args.num_blocks)
    model = model_paths(Settings())[SMOLLM2]
    rows = workload(args.requests, args.seed, subjects=args.subjects, exams=0.5, long=0.1, long_tokens=256,
                    chat_tokens=64)
    print(json.dumps({"requests": len(rows), "subjects": args.subjects, "kv_gib": args.kv_gib,
                      "num_blocks": args.num_blocks}), flush=True)
    repeats = []
    for rep in range(args.repeats):
        one = {}
        for order in ORDERS:
            r = run_service(rows, model, order, Path(tempfile.mkdtemp(prefix=f"bs-orders-{order}-")))
            one[order] = {"run_s": round(r.run_s, 1), "run_tok_s": round(r.run_tok_s, 1),
                          "cached_share": round(r.cached / r.prompt, 3), "whole_s": round(r.whole_s, 1)}
        best = max(one["fcfs"]["run_tok_s"], one["dfs"]["run_tok_s"])
        one["blend_vs_best_simple"] = round(one["blendserve"]["run_tok_s"] / best, 3)
        one["blend_vs_fcfs"] = round(one["blendserve"]["run_tok_s"] / one["fcfs"]["run_tok_s"], 3)
        repeats.append(one)
        print(json.dumps({"repeat": rep + 1, **one}), flush=True)
        if args.json:
            with args.json.open("a") as f:
                f.write(json.dumps({"repeat": rep + 1, "args": vars(args) | {"json": str(args.json)}, **one}) + "\n")
    med = {k: statistics.median(r[k] for r in repeats) for k in ("blend_vs_best_simple", "blend_vs_fcfs")}
    for order in ORDERS:
        med[f"{order}_run_tok_s"] = statistics.median(r[order]["run_tok_s"] for r in repeats)
        med[f"{order}_cached"] = statistics.median(r[order]["cached_share"] for r in repeats)
    print(json.dumps({"median": med}))


if __name__ == "__main__":
    main()
