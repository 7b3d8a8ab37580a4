"""GPU check: a small real model through the whole service on SGLang, Trace-#1-like mix.

Prints run-phase tokens/s for BlendServe order and FCFS order (our service,
`--engine sglang`), and for SGLang's own `lpm` (longest-prefix-match) order
with every request handed to sglang.Engine at once. Needs an NVIDIA GPU and
sglang importable (scripts/gpu_check.sh installs it from wheels in .whl/).

    PYTHONPATH=. python benchmarks/gpu_check.py --requests 600
"""
from __future__ import annotations

import argparse
import json
import random
import time

from benchmarks.harness import run_service
from core.config import SMOLLM2, Settings
from core.served import model_paths


def trace1_like(n: int, seed: int = 0) -> list[dict]:
    """BurstGPT-like chat, MMLU-like few-shot questions (shared prefixes, 1-2 token answers), and
    OpenVid-like long generations, mixed in file order."""
    rng = random.Random(seed)
    shots = [f"Subject {k}. " + " ".join(f"Q{j}: a question about topic {k}? A: {'ABCD'[j % 4]}." for j in range(40))
             for k in range(8)]
    rows = []
    for i in range(n):
        u = rng.random()
        if u < 0.55:
            body = {"messages": [{"role": "user", "content": rng.choice(shots) + f" Q: item {i}? A:"}],
                    "max_tokens": 2}
        elif u < 0.9:
            body = {"messages": [{"role": "system", "content": "You are a helpful assistant."},
                                 {"role": "user", "content": f"Summarise ticket {i} in a sentence."}],
                    "max_tokens": 32}
        else:
            body = {"messages": [{"role": "user", "content": f"Write a very long novel chapter {i}."}],
                    "max_tokens": 1024}
        rows.append({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
                     "body": {"model": SMOLLM2, "temperature": 0, **body}})
    return rows


def sglang_lpm(path, rows) -> float:
    import sglang

    from scheduler.service import model_info

    info = model_info(SMOLLM2, path)
    ids = info.encode([info.render_chat(r["body"]["messages"]) for r in rows])
    engine = sglang.Engine(model_path=str(path), schedule_policy="lpm", log_level="warning")
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
    rows = trace1_like(args.requests)
    res = {}
    for planner in ("blendserve", "fcfs"):
        r = run_service(rows, f"{SMOLLM2}={path}", worker_args=("--engine", "sglang"),
                        BLENDSERVE_PLANNER=planner, BLENDSERVE_CHUNK_REQUESTS="64")
        res[planner] = {"run_tok_s": round(r.run_tok_s, 1), "cached_share": round(r.cached_share, 3)}
        print(json.dumps({planner: res[planner]}), flush=True)
    res["sglang_lpm"] = {"run_tok_s": round(sglang_lpm(path, rows), 1)}
    print(json.dumps(res))


if __name__ == "__main__":
    main()
