"""GPU check: a small real model through the whole service on SGLang, Trace-#1-like mix.

Prints run-phase tokens/s for BlendServe, DFS (prefix-sorted) and FCFS
orders (our service, `--engine sglang`, mixed chunked prefill on), and for
SGLang's own `lpm` (longest-prefix-match, its DFS) order with every request
handed to sglang.Engine at once, with the same mixed-chunk settings, so the
four differ only in order. Needs an NVIDIA GPU and
sglang importable (scripts/gpu_check.sh installs it from wheels in .whl/).

    PYTHONPATH=. python benchmarks/gpu_check.py --requests 600
"""
from __future__ import annotations

import argparse
import json
import time

from benchmarks.harness import run_service
from benchmarks.prefix_mix import workload
from core.config import SMOLLM2, Settings
from core.served import model_paths


def sglang_lpm(path, rows) -> float:
    import sglang

    from core.bodies import model_info

    info = model_info(SMOLLM2, path)
    ids = info.encode([info.render_chat(r["body"]["messages"]) for r in rows])
    from worker.engines.sglang import STEP_TOKENS

    engine = sglang.Engine(model_path=str(path), schedule_policy="lpm", enable_mixed_chunk=True,
                           chunked_prefill_size=STEP_TOKENS, log_level="warning")
    params = [{"max_new_tokens": r["body"]["max_tokens"], "temperature": 0} for r in rows]
    t0 = time.time()
    outs = engine.generate(input_ids=ids, sampling_params=params)
    dt = time.time() - t0
    engine.shutdown()
    return sum(o["meta_info"]["prompt_tokens"] + o["meta_info"]["completion_tokens"] for o in outs) / dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=600)
    args = ap.parse_args()
    path = model_paths(Settings())[SMOLLM2]
    # Trace-#1-like: compute-dense exams behind shared prefixes, chat, and memory-dense long generations.
    rows = workload(args.requests, subjects=16, exams=0.55, long=0.1, long_tokens=1024)
    res = {}
    for planner in ("blendserve", "dfs", "fcfs"):
        r = run_service(rows, f"{SMOLLM2}={path}", worker_args=("--engine", "sglang"),
                        BLENDSERVE_PLANNER=planner, BLENDSERVE_CHUNK_REQUESTS="64")
        res[planner] = {"run_tok_s": round(r.run_tok_s, 1), "cached_share": round(r.cached_share, 3)}
        print(json.dumps({planner: res[planner]}), flush=True)
    res["sglang_lpm"] = {"run_tok_s": round(sglang_lpm(path, rows), 1)}
    best = max(res["fcfs"]["run_tok_s"], res["dfs"]["run_tok_s"], res["sglang_lpm"]["run_tok_s"])
    res["blend_vs_best_simple"] = round(res["blendserve"]["run_tok_s"] / best, 3)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
