"""The service on its default CPU engine vs vLLM's `run_batch` on the same file, side by side.

Ways, each repeat in this order, each on a fresh engine (no inherited prefix cache):
  a  `python -m vllm.entrypoints.openai.run_batch` on the file as given (prefix
     caching on, the team's VllmOptions as flags, VLLM_CPU_KVCACHE_SPACE GiB);
  s  the same, on the file sorted by prompt (what a careful user would do);
  c  the service (real api/scheduler/worker processes, SQLite, the planner) with
     the default CPU engine worker, started before the upload.
Figures as in benchmarks/vllm_vs_run_batch.py: run_batch's run phase (from its
"Reading batch" line to the output written) against the service's
create->completed (upload start to the last result written), and tokens per
CPU-second of each process tree. The better of a and s is the bar.

Files (benchmarks/prefix_mix.py generators): prefix (half MMLU-style exam
questions behind ~900-token few-shot prefixes, 10% long generations, 40% chat),
longgen (60% 256-token generations), chat (chat behind shared system prompts).

Run with vLLM's interpreter; LD_PRELOAD (Intel OpenMP, which vLLM needs) is set
for run_batch only, so the CPU engine runs as it does in a plain install:

    /work/main/.venv-vllm/bin/python -m benchmarks.cpu_vs_run_batch --files prefix --repeats 3
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.harness import WayRun, emit, run_service_way
from benchmarks.prefix_mix import workload
from benchmarks.vllm_vs_run_batch import run_vllm_batch
from blendserve.core.config import Settings
from blendserve.core.served import smollm2_checkpoint
from blendserve.worker.engines.vllm import VllmOptions

FILES = {
    "prefix": dict(subjects=24, exams=0.5, long=0.1, long_tokens=256, chat_tokens=64),
    "longgen": dict(subjects=8, exams=0.2, long=0.6, long_tokens=256, chat_tokens=64),
    "chat": dict(subjects=8, exams=0.0, long=0.05, long_tokens=256, chat_tokens=128),
}


def by_prompt(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: json.dumps(r["body"]["messages"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", nargs="+", default=["prefix"], choices=sorted(FILES))
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ways", default="asc")
    ap.add_argument("--kv-gib", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    preload = str(Path(sys.prefix) / "lib" / "libiomp5.so")    # the venv's, as scripts/setup_vllm.sh sets it
    if not Path(preload).exists():    # without it vLLM's CPU engine still starts, and runs many times slower
        raise SystemExit(f"{preload} is missing: run with the vLLM venv's python (scripts/setup_vllm.sh)")
    os.environ.pop("LD_PRELOAD", None)
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(args.kv_gib)
    model = smollm2_checkpoint(Settings())
    options = VllmOptions.from_settings(Settings().vllm)
    for name in args.files:
        rows = workload(args.requests, 0, **FILES[name])
        runs: list[WayRun] = []
        for _ in range(args.repeats):
            for way in args.ways:
                tmp = Path(tempfile.mkdtemp(prefix=f"bs-cpu-{way}-"))
                if way in "as":
                    os.environ["LD_PRELOAD"] = preload
                    try:
                        run = run_vllm_batch(by_prompt(rows) if way == "s" else rows, model, options, tmp)
                    finally:
                        os.environ.pop("LD_PRELOAD", None)
                    run.way = "s: vllm run_batch, sorted file" if way == "s" else "a: vllm run_batch"
                else:
                    run = run_service_way(rows, model, "blendserve", tmp, engine="cpu")
                    run.way = "c: service, cpu engine"
                runs.append(run)
                emit({"file": name, **run.summary(), "load": os.getloadavg()[0]}, args.json)
        med = {w: statistics.median(r.run_s for r in runs if r.way == w) for w in {r.way for r in runs}}
        print(json.dumps({"file": name, "median_seconds": med}), flush=True)


if __name__ == "__main__":
    main()
