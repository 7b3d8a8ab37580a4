"""The CPU engine's batch-invariant mode (BLENDSERVE_CPU_EXACT) against its default steps: tokens/s on one file,
each way on a fresh engine, interleaved. (That its outputs repeat is tested: tests/engine/test_exact.py.)

    PYTHONPATH=. .venv/bin/python benchmarks/exact_mode.py --runs 3 --out benchmarks/results/exact_mode.jsonl

The file: 64 requests of SmolLM2 token ids, prompts of 20-400 tokens, a third sharing a 100-token prefix and a
third a 50-token one, max_tokens 8, 32 or 96 (end-of-sequence banned, so every request runs to it), greedy.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

from blendserve.core.config import Settings
from blendserve.core.engine_settings import CpuEngineSettings
from blendserve.core.served import smollm2_checkpoint
from blendserve.worker.engines.base import GenRequest, SamplingParams
from blendserve.worker.engines.cpu import CpuEngine


def requests(n: int = 64, seed: int = 0) -> list[GenRequest]:
    rng = random.Random(seed)
    shared = [rng.randrange(1000, 40000) for _ in range(100)]
    return [GenRequest(i, shared[:rng.choice([0, 50, 100])] + [rng.randrange(1000, 40000)
                                                                for _ in range(rng.randint(20, 400))],
                       SamplingParams(max_tokens=rng.choice([8, 32, 96]), temperature=0.0,
                                      logit_bias=((0, -100.0), (2, -100.0))))
            for i in range(n)]


def run(path: Path, exact: bool, threads: int) -> dict:
    eng = CpuEngine(path, "m", threads=threads, config=CpuEngineSettings(exact=exact))
    next(eng.generate([GenRequest(-1, [5, 6, 7], SamplingParams(max_tokens=2))]))     # warm: first-step costs
    t0 = time.perf_counter()
    out = {r.key: r for r in eng.generate(requests())}
    seconds = time.perf_counter() - t0
    tokens = sum(r.prompt_tokens - r.cached_tokens + len(r.output_ids) for r in out.values())
    return {"exact": exact, "seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    path = smollm2_checkpoint(Settings())
    rows = []
    for i in range(a.runs):
        for exact in (False, True):
            r = run(path, exact, a.threads)
            r["run"] = i
            rows.append(r)
            print(f"run {i} exact={exact}: {r['seconds']:.1f} s, {r['tokens_per_s']:.0f} tok/s", flush=True)
    off = statistics.median(r["tokens_per_s"] for r in rows if not r["exact"])
    on = statistics.median(r["tokens_per_s"] for r in rows if r["exact"])
    print(f"medians: default {off:.0f} tok/s, exact {on:.0f} tok/s, exact / default {on / off:.2f}x")
    if a.out:
        with a.out.open("w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
