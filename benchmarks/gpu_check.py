"""GPU check: a small real model through the whole service on SGLang, Trace-#1-like mix, one table.

Run-phase tokens/s for BlendServe, DFS (prefix-sorted) and FCFS orders (our
service, `--engine sglang`, mixed chunked prefill on), and for SGLang's own
`lpm` (longest-prefix-match, its DFS) order, with the same engine arguments
but `schedule_policy="lpm"`, so the four differ only in order. SGLang sorts
by prefix only while at most 128 requests wait (more, and `lpm` falls back to
FCFS: WAITING_QUEUE_PREFIX_MATCH_MAX in its schedule_policy.py), so the `lpm`
run submits in windows: at most LPM_WINDOW requests waiting in SGLang or on
their way to it, as its load snapshot shows them. Needs an NVIDIA GPU and sglang (scripts/gpu_check.sh
installs it).

    python -m benchmarks.gpu_check --requests 450
"""
from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from benchmarks.harness import run_service
from benchmarks.prefix_mix import workload
from blendserve.core.config import SMOLLM2, Settings, get_settings
from blendserve.core.served import smollm2_checkpoint

LPM_QUEUE_MAX = 128   # SGLang's lpm sorts the waiting queue only while it holds at most this many
# What the lpm run aims at: below SGLang's limit by a margin for its load snapshot's lag (published every
# few forward passes, so requests that just finished or just arrived are counted a moment late).
LPM_WINDOW = 112
POLL_S = 0.02


async def submit_in_windows(engine: Any, ids: list[list[int]], params: list[dict], window: int = LPM_WINDOW,
                            poll_s: float = POLL_S) -> list[dict]:
    """Every request through `engine.async_generate`, with at most `window` of them waiting: in SGLang's
    queue (its load snapshot, `get_loads`) or sent and not yet counted there. Runs on the engine's own loop
    (`Engine.loop`), the one that reads its outputs. Without a snapshot, every unfinished request counts as
    waiting (never more than `window` in flight)."""
    tm = engine.tokenizer_manager
    tasks: list[asyncio.Future] = []
    sent = 0
    while sent < len(ids):
        loads = await tm.get_loads(include=["core"])
        waiting = sum(load.num_waiting_reqs for load in loads)
        running = sum(load.num_running_reqs for load in loads)
        unfinished = sum(not t.done() for t in tasks)
        unseen = max(0, unfinished - running - waiting)      # sent, not in the snapshot yet
        room = window - waiting - unseen if loads else window - unfinished
        for _ in range(max(0, min(room, len(ids) - sent))):
            call = engine.async_generate(input_ids=ids[sent], sampling_params=params[sent])
            tasks.append(asyncio.ensure_future(call))
            sent += 1
        await asyncio.sleep(poll_s)
    return list(await asyncio.gather(*tasks))


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


def table(res: dict[str, dict]) -> str:
    lines = [f"{'order':<12} {'run tok/s':>10} {'cached':>7} {'vs BlendServe':>14}"]
    base = res["blendserve"]["run_tok_s"]
    for name, r in res.items():
        cached = f"{r['cached_share']:.1%}" if "cached_share" in r else "-"
        lines.append(f"{name:<12} {r['run_tok_s']:>10.1f} {cached:>7} {r['run_tok_s'] / base:>13.3f}x")
    return "\n".join(lines)


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
