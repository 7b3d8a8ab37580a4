"""GPU check: a small real model through the whole service on SGLang, Trace-#1-like mix, one table.

Run-phase tokens/s for BlendServe, DFS (prefix-sorted) and FCFS orders (our
service, `--engine sglang`, mixed chunked prefill on), and for SGLang's own
`lpm` (longest-prefix-match, its DFS) order, with the same engine arguments
but `schedule_policy="lpm"`, so the four differ only in order. The `lpm`
run submits in windows (tests/harness/sglang_lpm.py), so SGLang really sorts.
Needs an NVIDIA GPU and sglang (scripts/gpu_check.sh installs it).

    python -m benchmarks.gpu_check --requests 450
"""
from __future__ import annotations

import argparse
import json
import time

from benchmarks.harness import run_service
from benchmarks.prefix_mix import workload
from blendserve.core.config import SMOLLM2, Settings, get_settings
from blendserve.core.served import smollm2_checkpoint
from tests.harness.sglang_lpm import submit_in_windows, table


def sglang_lpm(path, rows) -> float:
    """SGLang's own lpm order on the same engine arguments as the service's worker; run-phase tokens/s."""
    import sglang

    from blendserve.protocol.bodies import model_info
    from blendserve.worker.engines.sglang_args import engine_args

    info = model_info(SMOLLM2, path)
    ids = info.encode([info.render_chat(r["body"]["messages"]) for r in rows])
    # SGLang allows priority scheduling under fcfs and lof only; lpm's own order is what is measured here.
    engine = sglang.Engine(**{**engine_args(path, get_settings().sglang), "schedule_policy": "lpm",
                              "enable_priority_scheduling": False})
    params = [{"max_new_tokens": r["body"]["max_tokens"], "temperature": 0} for r in rows]
    t0 = time.time()
    outs = engine.loop.run_until_complete(submit_in_windows(engine, ids, params))
    dt = time.time() - t0
    engine.shutdown()
    return sum(o["meta_info"]["prompt_tokens"] + o["meta_info"]["completion_tokens"] for o in outs) / dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=450)
    args = ap.parse_args()
    path = smollm2_checkpoint(Settings())
    # Trace-#1-like: compute-dense exams behind shared prefixes, chat, and memory-dense long generations.
    rows = workload(args.requests, subjects=16, exams=0.55, long=0.1, long_tokens=1024)
    res: dict[str, dict] = {}
    for planner in ("blendserve", "dfs", "fcfs"):
        r = run_service(rows, f"{SMOLLM2}={path}", worker_args=("--engine", "sglang"),
                        BLENDSERVE_PLANNER=planner, BLENDSERVE_CHUNK_REQUESTS="64")
        res[planner] = {"run_tok_s": round(r.run_tok_s, 1), "cached_share": round(r.cached_share, 3)}
        print(json.dumps({planner: res[planner]}), flush=True)
    res["sglang_lpm"] = {"run_tok_s": round(sglang_lpm(path, rows), 1)}
    print(json.dumps(res), flush=True)
    print(table(res))


if __name__ == "__main__":
    main()
