"""The CPU engine alone against vLLM's engine alone (SmolLM2-135M-Instruct, same weights, same requests).

Each engine runs in its own interpreter (the CPU engine in .venv, vLLM's CPU
build in .venv-vllm), driven through the worker's own engine classes
(blendserve/worker/engines/cpu, blendserve/worker/engines/vllm.py), so each is measured as the
service runs it: the CPU engine with its defaults (one torch thread, 1024-token
steps), vLLM with the service's VllmOptions and max_num_seqs raised to the
largest N. Figures at N running sequences, medians of --runs:

* prefill tokens/s: N distinct prompts of --prompt random token ids, max_tokens 1;
* decode output tokens/s: N distinct 16-token prompts, --output tokens each,
  EOS suppressed (a -100 logit bias) so that every sequence runs to the end.

Prompts are fresh random ids in every run, so no prefix cache hits.

    PYTHONPATH=. .venv/bin/python -m benchmarks.engine_vs_vllm --json benchmarks/results/engine_vs_vllm.jsonl
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHONS = {"cpu": ROOT / ".venv/bin/python", "vllm": ROOT / ".venv-vllm/bin/python"}


def child(engine_name: str, sizes: list[int], runs: int, prompt: int, output: int, seed: int) -> None:
    """Measure one engine; print one JSON line per (N, kind)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from blendserve.core.config import SMOLLM2, Settings
    from blendserve.core.modelstore import eos_token_ids
    from blendserve.core.served import smollm2_checkpoint
    from blendserve.worker.engines.base import GenRequest, SamplingParams

    path = smollm2_checkpoint(Settings())
    if engine_name == "cpu":
        from blendserve.worker.engines.cpu import CpuEngine
        engine = CpuEngine(path, SMOLLM2, config=Settings().cpu)
    else:
        from blendserve.worker.engines.vllm import VllmEngine, VllmOptions
        options = VllmOptions.from_settings(Settings().vllm)
        engine = VllmEngine(path, SMOLLM2, dataclasses.replace(options, max_num_seqs=max(sizes)))
    no_eos = tuple((t, -100.0) for t in eos_token_ids(path))
    rng = random.Random(seed)

    def prompts(n: int, length: int) -> list[list[int]]:
        return [[rng.randrange(100, 40000) for _ in range(length)] for _ in range(n)]

    def timed(reqs: list[GenRequest]) -> tuple[float, list]:
        t = time.perf_counter()
        results = list(engine.generate(reqs))
        return time.perf_counter() - t, results

    timed([GenRequest(0, p, SamplingParams(max_tokens=4, temperature=0.0)) for p in prompts(4, 32)])  # warm-up
    for n in sizes:
        for kind in ("prefill", "decode"):
            samples, short = [], 0
            for _ in range(runs):
                if kind == "prefill":
                    reqs = [GenRequest(i, p, SamplingParams(max_tokens=1, temperature=0.0))
                            for i, p in enumerate(prompts(n, prompt))]
                    dt, _ = timed(reqs)
                    samples.append(n * prompt / dt)
                else:
                    reqs = [GenRequest(i, p, SamplingParams(max_tokens=output, temperature=0.0, logit_bias=no_eos))
                            for i, p in enumerate(prompts(n, 16))]
                    dt, res = timed(reqs)
                    samples.append(sum(r.completion_tokens for r in res) / dt)   # a few may stop short (vLLM's
                    short += sum(r.completion_tokens < output for r in res)          # own stop ids): counted
            print(json.dumps({"engine": engine_name, "n": n, "kind": kind, "tok_s": statistics.median(samples),
                              "samples": samples, "short": short}), flush=True)
    engine.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engines", nargs="+", default=["cpu", "vllm"], choices=sorted(PYTHONS))
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 16, 64, 256])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--output", type=int, default=32)
    ap.add_argument("--child", choices=sorted(PYTHONS), help=argparse.SUPPRESS)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    common = ["--sizes", *map(str, args.sizes), "--runs", str(args.runs), "--prompt", str(args.prompt),
              "--output", str(args.output)]
    if args.child:
        child(args.child, args.sizes, args.runs, args.prompt, args.output, seed=sorted(PYTHONS).index(args.child))
        return
    rows = []
    for name in args.engines:
        env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
        if name == "vllm":   # vLLM's CPU build needs Intel OpenMP preloaded (scripts/setup_vllm.sh)
            env["LD_PRELOAD"] = str(PYTHONS["vllm"].parent.parent / "lib" / "libiomp5.so")
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
        out = subprocess.run([str(PYTHONS[name]), "-m", "benchmarks.engine_vs_vllm", "--child", name, *common],
                             cwd=ROOT, env=env, capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"{name} failed:\n{out.stderr[-4000:]}")
        for line in out.stdout.splitlines():
            if line.startswith("{"):
                print(line, flush=True)
                rows.append(json.loads(line))
    table = {(r["n"], r["kind"]): {} for r in rows}
    for r in rows:
        table[(r["n"], r["kind"])][r["engine"]] = r["tok_s"]
    print("| N | kind | " + " | ".join(args.engines) + " | cpu / vllm |")
    for (n, kind), v in table.items():
        ratio = v["cpu"] / v["vllm"] if {"cpu", "vllm"} <= v.keys() else float("nan")
        print(f"| {n} | {kind} | " + " | ".join(f"{v.get(e, float('nan')):.1f}" for e in args.engines)
              + f" | {ratio:.2f}x |")
    if args.json:
        with args.json.open("a") as f:
            f.write(json.dumps({"argv": sys.argv, "cpus": os.cpu_count(), "rows": rows}) + "\n")


if __name__ == "__main__":
    main()
