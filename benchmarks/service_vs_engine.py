"""The CPU engine alone vs the whole service, same requests, same order (FCFS), greedy.

Engine alone: the same token ids the service would compute, fed straight to
CpuEngine.generate in file order. Service: upload + batch through the real
API, scheduler and worker processes (SQLite). Tokens/s counts prompt +
completion tokens. Reported per repeat and as medians:
  run_ratio   = service tokens/s over its run phase (first claim to last result) / engine tokens/s
  whole_ratio = service tokens/s from batch creation to `completed` / engine tokens/s

    PYTHONPATH=. .venv/bin/python benchmarks/service_vs_engine.py --requests 48 --repeats 3
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from benchmarks.harness import run_service
from blendserve.core.config import SMOLLM2, Settings
from blendserve.core.served import smollm2_checkpoint
from blendserve.scheduler.service import model_info
from blendserve.worker.engines.base import GenRequest
from blendserve.worker.engines.cpu import CpuEngine
from blendserve.worker.responses import sampling_params

TOPICS = ["photosynthesis", "the French revolution", "binary search", "volcanoes", "the immune system",
          "compound interest", "the Roman empire", "black holes"]


def workload(n: int, max_tokens: int) -> list[dict]:
    rows = []
    for i in range(n):
        system = "You are a concise teacher." if i % 2 else "You are a helpful assistant that answers briefly."
        q = f"Explain {TOPICS[i % len(TOPICS)]} to a student in year {i % 12 + 1}."
        rows.append({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
                     "body": {"model": SMOLLM2, "temperature": 0, "max_tokens": max_tokens,
                              "messages": [{"role": "system", "content": system}, {"role": "user", "content": q}]}})
    return rows


def engine_alone(path: Path, rows: list[dict], max_batch: int) -> float:
    info = model_info(SMOLLM2, path)
    texts = [info.render_chat(r["body"]["messages"]) for r in rows]
    ids = info.encode(texts)
    reqs = [GenRequest(i, t, sampling_params(r["body"], r["body"]["max_tokens"])) for i, (t, r) in
            enumerate(zip(ids, rows))]
    engine = CpuEngine(path, SMOLLM2, max_running=max_batch)
    t0 = time.time()
    toks = sum(r.prompt_tokens + r.completion_tokens for r in engine.generate(iter(reqs)))
    dt = time.time() - t0
    engine.close()
    return toks / dt


def service(path: Path, rows: list[dict], max_batch: int) -> tuple[float, float]:
    r = run_service(rows, f"{SMOLLM2}={path}", BLENDSERVE_PLANNER="fcfs", BLENDSERVE_CHUNK_REQUESTS="16",
                    BLENDSERVE_CPU_MAX_BATCH=str(max_batch))
    return r.run_tok_s, r.tokens / r.whole_s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=48)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    path = smollm2_checkpoint(Settings())
    rows = workload(args.requests, args.max_tokens)
    runs = []
    for _ in range(args.repeats):
        eng = engine_alone(path, rows, args.max_batch)
        run, whole = service(path, rows, args.max_batch)
        runs.append({"engine_tok_s": round(eng, 1), "service_run_tok_s": round(run, 1),
                     "service_whole_tok_s": round(whole, 1), "run_ratio": round(run / eng, 3),
                     "whole_ratio": round(whole / eng, 3)})
        print(json.dumps(runs[-1]), flush=True)
    print(json.dumps({"median_run_ratio": statistics.median(r["run_ratio"] for r in runs),
                      "median_whole_ratio": statistics.median(r["whole_ratio"] for r in runs),
                      "median_engine_tok_s": statistics.median(r["engine_tok_s"] for r in runs)}))


if __name__ == "__main__":
    main()
