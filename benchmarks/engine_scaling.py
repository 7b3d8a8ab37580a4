"""The CPU engine alone (SmolLM2-135M-Instruct): the paged, mixed-step engine against the old slot engine.

Three figures, each measured side by side in one process (runs interleaved,
old/new/old/new..., medians of --runs):

* scaling: prefill tokens/s (N prompts of --prompt tokens, max_tokens 1) and
  decode output tokens/s (N prompts of 16 tokens, --output tokens each, EOS
  ignored so every sequence runs to the end) at N = 1, 16, 64, 256 running
  sequences. The old engine (blendserve/worker/engines/cpu.py at --old-ref) gets
  max_batch = N and a KV budget that admits all N; the new one its defaults.
  Every run uses prompts no earlier run used, so no prefix cache hits.
* blend (the engine's defaults but the running cap): the same requests (compute-dense: long distinct prompts, 2 output
  tokens; memory-dense: short prompts, long outputs) fed in DFS order (all of
  one kind, then the other, as a prefix tree's DFS puts them) and blended
  (interleaved 1:1); with the step composition of each run.
* rss: peak RSS of a fresh process (the engine's defaults) running 256
  sequences at once (each 64 prompt + 96 output tokens: 41K tokens of K/V).

    python -m benchmarks.engine_scaling --out benchmarks/results/engine_scaling.md
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from blendserve.core.modelstore import ensure_checkpoint, smollm2_gguf_path  # noqa: E402
from blendserve.worker.engines.base import GenRequest, SamplingParams  # noqa: E402
from blendserve.worker.engines.cpu import CpuEngine  # noqa: E402

MODEL = "SmolLM2-135M-Instruct"
_fresh = random.Random(0)


def old_engine_class(ref: str):
    """The old CpuEngine, loaded from git (it was one module before this rebuild)."""
    src = subprocess.run(["git", "show", f"{ref}:blendserve/worker/engines/cpu.py"], capture_output=True, text=True,
                         check=True).stdout
    path = Path(tempfile.mkdtemp()) / "old_cpu_engine.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("old_cpu_engine", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_cpu_engine"] = module
    spec.loader.exec_module(module)
    return module.CpuEngine


def distinct_prompts(n: int, length: int) -> list[list[int]]:
    """Random token ids (ids 100..40000 of SmolLM2's 49K): no two prompts share a first block."""
    return [[_fresh.randrange(100, 40000) for _ in range(length)] for _ in range(n)]


def timed(engine, requests: list[GenRequest]) -> tuple[float, list]:
    t = time.perf_counter()
    results = list(engine.generate(requests))
    return time.perf_counter() - t, results


def scaling(path: Path, old_cls, sizes: list[int], runs: int, prompt: int, output: int) -> list[dict]:
    rows = []
    new = CpuEngine(path, MODEL, threads=1)
    new.eos = set()
    for n in sizes:
        old = old_cls(path, MODEL, max_batch=n, threads=1, kv_capacity_tokens=n * (prompt + output + 64))
        old.eos = set()
        for kind in ("prefill", "decode"):
            samples: dict[str, list[float]] = {"old": [], "new": []}
            for _ in range(runs):
                for name, engine in (("old", old), ("new", new)):
                    if kind == "prefill":
                        reqs = [GenRequest(i, p, SamplingParams(max_tokens=1, temperature=0.0))
                                for i, p in enumerate(distinct_prompts(n, prompt))]
                        dt, _ = timed(engine, reqs)
                        samples[name].append(n * prompt / dt)
                    else:
                        reqs = [GenRequest(i, p, SamplingParams(max_tokens=output, temperature=0.0))
                                for i, p in enumerate(distinct_prompts(n, 16))]
                        dt, res = timed(engine, reqs)
                        samples[name].append(sum(r.completion_tokens for r in res) / dt)
            row = {"n": n, "kind": kind, **{k: statistics.median(v) for k, v in samples.items()},
                   "samples": samples}
            row["ratio"] = row["new"] / row["old"]
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def composition(steps) -> dict:
    both = sum(1 for s in steps if s.prefill_tokens and s.decode_tokens)
    return {"steps": len(steps), "mixed_steps": both,
            "prefill_per_step": statistics.mean(s.prefill_tokens for s in steps),
            "decode_per_step": statistics.mean(s.decode_tokens for s in steps),
            "decode_only_steps": sum(1 for s in steps if not s.prefill_tokens),
            "preempted": sum(s.preempted for s in steps)}


def blend(path: Path, runs: int, compute: int, memory: int, long_prompt: int, long_output: int,
          max_running: int) -> list[dict]:
    """DFS vs blended order on the engine alone; fresh engine per run (empty prefix cache)."""
    rows = []
    samples: dict[str, list[dict]] = {"dfs": [], "blend": []}
    for _ in range(runs):
        dense = [SamplingParams(max_tokens=2, temperature=0.0)] * compute
        light = [SamplingParams(max_tokens=long_output, temperature=0.0)] * memory
        c = list(zip(distinct_prompts(compute, long_prompt), dense))
        m = list(zip(distinct_prompts(memory, 24), light))
        orders = {"dfs": c + m,
                  "blend": [x for pair in zip(c, m) for x in pair] + c[len(m):] + m[len(c):]}
        for name, order in orders.items():
            engine = CpuEngine(path, MODEL, max_running=max_running)    # the engine's default threads
            engine.eos = set()
            engine.step_log = []
            reqs = [GenRequest(i, p, s) for i, (p, s) in enumerate(order)]
            dt, res = timed(engine, reqs)
            tokens = sum(r.prompt_tokens + r.completion_tokens for r in res)
            run = {"order": name, "seconds": dt, "tok_s": tokens / dt, **composition(engine.step_log)}
            print(json.dumps(run), flush=True)
            samples[name].append(run)
    for name, runs_ in samples.items():
        rows.append({"order": name, **{k: statistics.median(r[k] for r in runs_) for k in runs_[0] if k != "order"}})
    return rows


def peak_rss(path: Path) -> dict:
    """Run 256 sequences at once in a fresh process; its peak RSS."""
    code = f"""
import os, sys, json
sys.path.insert(0, {str(Path.cwd())!r})
from blendserve.worker.engines.cpu import CpuEngine
from blendserve.worker.engines.base import GenRequest, SamplingParams
import random
rng = random.Random(5)
e = CpuEngine({str(path)!r}, "m")
e.eos = set(); e.step_log = []
def hwm():  # VmHWM, not ru_maxrss: the latter keeps the forking parent's peak across exec
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1]) / 1024
before = hwm()
reqs = [GenRequest(i, [rng.randrange(100, 40000) for _ in range(64)], SamplingParams(max_tokens=96, temperature=0.0))
        for i in range(256)]
out = list(e.generate(reqs))
print(json.dumps({{"peak_rss_mb": hwm(), "rss_before_mb": before,
                  "max_running": max(s.decode_tokens for s in e.step_log),
                  "kv_capacity_tokens": e.kv_capacity_tokens(), "preempted": sum(s.preempted for s in e.step_log)}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    row = json.loads(out.strip().splitlines()[-1])
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache-dir", type=Path, default=Path("blendserve-data/models"))
    ap.add_argument("--old-ref", default="61c2abc", help="a commit whose worker/engines/cpu.py is the old engine")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 16, 64, 256])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--output", type=int, default=32)
    ap.add_argument("--parts", default="scaling,blend,rss")
    ap.add_argument("--blend", type=int, nargs=4, default=[48, 48, 384, 128],
                    metavar=("COMPUTE", "MEMORY", "LONG_PROMPT", "LONG_OUTPUT"))
    ap.add_argument("--blend-max-running", type=int, default=32,
                    help="running cap in the blend runs: a small cap stands for a KV pool far smaller than the batch")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(1)
    path = ensure_checkpoint(smollm2_gguf_path(), args.cache_dir)
    parts = args.parts.split(",")
    load0 = os.getloadavg()[0]
    out: dict = {"argv": sys.argv, "cpus": os.cpu_count(), "torch": torch.__version__, "load_start": load0}
    if "scaling" in parts:
        out["scaling"] = scaling(path, old_engine_class(args.old_ref), args.sizes, args.runs, args.prompt, args.output)
    if "blend" in parts:
        out["blend"] = blend(path, args.runs, *args.blend, args.blend_max_running)
    if "rss" in parts:
        out["rss"] = peak_rss(path)
    out["load_end"] = os.getloadavg()[0]
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        with args.json.open("a") as f:
            f.write(json.dumps(out) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k not in ("scaling", "blend")}))


if __name__ == "__main__":
    main()
