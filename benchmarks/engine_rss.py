"""The CPU engine's memory (SmolLM2-135M-Instruct): peak RSS of a fresh process running 256 sequences at once.

Each sequence is 64 prompt + 96 output tokens (41K tokens of K/V), on the engine's defaults; the process's
resident memory before the first request and at its peak (VmHWM).

    .venv/bin/python -m benchmarks.engine_rss --json benchmarks/results/engine_rss.jsonl
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from blendserve.core.modelstore import ensure_checkpoint, smollm2_gguf_path  # noqa: E402


def peak_rss(path: Path) -> dict:
    """Run 256 sequences at once in a fresh process; its peak RSS."""
    code = f"""
import os, sys, json
sys.path.insert(0, {str(Path.cwd())!r})
from blendserve.core.engine_settings import CpuEngineSettings
from blendserve.worker.engines.cpu import CpuEngine
from blendserve.worker.engines.base import GenRequest, SamplingParams
import random
rng = random.Random(5)
e = CpuEngine({str(path)!r}, "m", config=CpuEngineSettings())
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
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    path = ensure_checkpoint(smollm2_gguf_path(), args.cache_dir)
    out: dict = {"argv": sys.argv, "cpus": os.cpu_count(), "torch": torch.__version__,
                 "load_start": os.getloadavg()[0], "rss": peak_rss(path), "load_end": os.getloadavg()[0]}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        with args.json.open("a") as f:
            f.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
