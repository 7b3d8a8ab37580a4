"""BlendServe order vs FCFS order through the whole service, real SmolLM2 on the CPU engine.

A prefix-heavy mix in file order as users write it (job types interleaved):
MMLU-like few-shot questions behind a few long shared prefixes with 1-2 token
answers, long generations from short prompts, and chat behind shared system
prompts. Same file, same service, same engine; only BLENDSERVE_PLANNER
changes. Reports run-phase tokens/s (prompt + completion, first claim to last
result), the cached-token share, and the ratio, median over repeats.

    PYTHONPATH=. .venv/bin/python benchmarks/service_blend_vs_fcfs.py --requests 240 --repeats 3
"""
from __future__ import annotations

import argparse
import json
import random
import statistics

from benchmarks.harness import run_service
from core.config import SMOLLM2, Settings
from core.served import model_paths

# MMLU has 57 subjects, each with its own few-shot prefix: more than the CPU engine's 8K-token prefix cache holds.
SUBJECTS = ["abstract algebra", "anatomy", "astronomy", "business ethics", "clinical knowledge", "college biology",
            "college chemistry", "computer security", "conceptual physics", "econometrics", "formal logic",
            "global facts", "high school geography", "human aging", "international law", "jurisprudence",
            "machine learning", "management", "marketing", "medical genetics", "nutrition", "philosophy",
            "prehistory", "virology"]
SYSTEMS = ["You are a friendly travel agent. Answer in two sentences.",
           "You are a strict grammar teacher. Correct the user's sentence."]


def few_shot(subject: str) -> str:
    shots = "".join(f"Question {k}: Which statement about {subject} is true?\n"
                    f"A) first option {k}\nB) second option {k}\nC) third option {k}\nD) fourth option {k}\n"
                    f"Answer: {'ABCD'[k % 4]}\n\n" for k in range(10))
    return f"The following are multiple choice questions about {subject}.\n\n{shots}"


def workload(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        kind = rng.random()
        if kind < 0.6:
            subject = rng.choice(SUBJECTS)
            body = {"messages": [{"role": "user", "content": few_shot(subject) +
                                  f"Question: Which of these {subject} facts number {i} holds?\n"
                                  "A) one\nB) two\nC) three\nD) four\nAnswer:"}], "max_tokens": rng.choice([1, 2])}
        elif kind < 0.8:
            body = {"messages": [{"role": "user", "content": f"Write a long story about a robot named R{i}."}],
                    "max_tokens": 96}
        else:
            body = {"messages": [{"role": "system", "content": rng.choice(SYSTEMS)},
                                 {"role": "user", "content": f"Help me with request number {i}."}],
                    "max_tokens": 32}
        rows.append({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
                     "body": {"model": SMOLLM2, "temperature": 0, **body}})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=240)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    models = f"{SMOLLM2}={model_paths(Settings())[SMOLLM2]}"
    rows = workload(args.requests, args.seed)
    results = []
    for rep in range(args.repeats):
        one = {}
        for planner in ("fcfs", "blendserve"):
            r = run_service(rows, models, BLENDSERVE_PLANNER=planner)
            one[planner] = {"run_tok_s": round(r.run_tok_s, 1), "cached_share": round(r.cached_share, 3),
                            "run_s": round(r.run_s, 1), "whole_s": round(r.whole_s, 1), "wait_s": round(r.wait_s, 2)}
        one["ratio"] = round(one["blendserve"]["run_tok_s"] / one["fcfs"]["run_tok_s"], 3)
        results.append(one)
        print(json.dumps(one), flush=True)
    print(json.dumps({"median_ratio": statistics.median(r["ratio"] for r in results),
                      "median_fcfs_cached": statistics.median(r["fcfs"]["cached_share"] for r in results),
                      "median_blend_cached": statistics.median(r["blendserve"]["cached_share"] for r in results)}))


if __name__ == "__main__":
    main()
