"""The CPU engine alone on one of cpu_vs_run_batch's files, at 1 and 2 torch threads (medians of --runs).

Requests in prompt-sorted order (the order a prefix-sorted plan feeds), greedy,
each run on a fresh engine; prints the seconds and the step totals per run.

    PYTHONPATH=. .venv/bin/python -m benchmarks.engine_threads --file prefix --threads 1 2 --runs 3 \\
        --json benchmarks/results/engine_threads.jsonl
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.cpu_vs_run_batch import FILES, by_prompt  # noqa: E402
from benchmarks.prefix_mix import workload  # noqa: E402
from core.config import SMOLLM2, Settings  # noqa: E402
from core.modelstore import load_tokenizer  # noqa: E402
from core.served import model_paths  # noqa: E402
from worker.engines.base import GenRequest, SamplingParams  # noqa: E402
from worker.engines.cpu import CpuEngine  # noqa: E402


def requests(name: str, n: int, path: Path) -> list[GenRequest]:
    tok = load_tokenizer(path)
    out = []
    for i, row in enumerate(by_prompt(workload(n, 0, **FILES[name]))):
        text = tok.apply_chat_template(row["body"]["messages"], add_generation_prompt=True, tokenize=False)
        out.append(GenRequest(i, tok.encode(text, add_special_tokens=False),
                              SamplingParams(max_tokens=row["body"]["max_tokens"], temperature=0.0)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--file", default="prefix", choices=sorted(FILES))
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    path = model_paths(Settings())[SMOLLM2]
    reqs = requests(args.file, args.requests, path)
    seconds: dict[int, list[float]] = {t: [] for t in args.threads}
    for _ in range(args.runs):
        for threads in args.threads:        # interleaved, so drift in the machine hits every count alike
            engine = CpuEngine(path, SMOLLM2, threads=threads)
            engine.step_log = []
            t = time.perf_counter()
            res = list(engine.generate(reqs))
            seconds[threads].append(time.perf_counter() - t)
            row = {"file": args.file, "threads": threads, "seconds": round(seconds[threads][-1], 2),
                   "steps": len(engine.step_log), "prefill": sum(s.prefill_tokens for s in engine.step_log),
                   "decode": sum(s.decode_tokens for s in engine.step_log),
                   "cached": sum(r.cached_tokens for r in res), "completion": sum(r.completion_tokens for r in res),
                   "load": os.getloadavg()[0]}
            print(json.dumps(row), flush=True)
            if args.json:
                with args.json.open("a") as f:
                    f.write(json.dumps(row) + "\n")
    print(json.dumps({"file": args.file, "median_seconds": {t: statistics.median(s) for t, s in seconds.items()}}))


if __name__ == "__main__":
    main()
