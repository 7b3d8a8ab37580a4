"""Time from a large batch turning `in_progress` to its first chunk being claimable, and the
scheduler's peak memory while planning it (BlendServe planner, real scheduler process).

The request rows are written straight into the job table (as validation would
leave them) with a realistic prefix structure: few-shot prefixes shared by
many short-answer questions, chat behind shared system prompts, unique long
prompts, under a batch in a status no role acts on. Then the batch is flipped to in_progress and the clock runs until
the first chunk row exists.

    PYTHONPATH=. .venv/bin/python benchmarks/plan_latency.py --requests 50000
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from sqlalchemy import func, insert, select, update

from benchmarks.harness import rss_kb
from blendserve.core.config import SMOLLM2, Settings
from blendserve.core.db import make_engine, make_sessionmaker
from blendserve.core.models import Batch, Chunk, File, Request
from blendserve.core.served import smollm2_checkpoint
from blendserve.migrations.upgrade import upgrade
from tests.harness.deployment import Deployment


def prompts(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    prefixes = [rng.integers(100, 40000, size=int(rng.integers(300, 900)), dtype=np.int32) for _ in range(20)]
    out = []
    for _ in range(n):
        kind = rng.random()
        if kind < 0.5:
            tail = rng.integers(100, 40000, size=int(rng.integers(20, 80)), dtype=np.int32)
            out.append(np.concatenate([prefixes[int(rng.integers(0, 20))], tail]))
        else:
            out.append(rng.integers(100, 40000, size=int(rng.integers(50, 1500)), dtype=np.int32))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=50_000)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bs-plan-"))
    settings = Settings(data_dir=tmp)
    tmp.mkdir(exist_ok=True)
    upgrade(settings.db_url)
    sessions = make_sessionmaker(make_engine(settings.db_url))
    now = int(time.time())
    ps = prompts(args.requests)
    with sessions.begin() as s:
        s.add(File(id="file-bench", owner="", filename="x.jsonl", purpose="batch", bytes=0, created_at=now))
        s.add(Batch(id="batch_bench", owner="", endpoint="/v1/chat/completions", model=SMOLLM2,
                    input_file_id="file-bench", completion_window="24h", status="staging", created_at=now,
                    expires_at=now + 86400, total=len(ps)))
    for start in range(0, len(ps), 2000):
        with sessions.begin() as s:
            s.execute(insert(Request), [
                {"batch_id": "batch_bench", "line": i + 1, "custom_id": f"r{i}", "model": SMOLLM2,
                 "body": {"max_tokens": 32}, "prompt_ids": ps[i].astype("<i4").tobytes(),
                 "prompt_tokens": len(ps[i]), "max_tokens": 32, "status": "pending",
                 "completion_tokens": 0, "cached_tokens": 0} for i in range(start, min(start + 2000, len(ps)))])
    path = smollm2_checkpoint(Settings())
    d = Deployment(tmp, "", f"{SMOLLM2}={path}", BLENDSERVE_PLANNER="blendserve", BLENDSERVE_HARDWARE="cpu",
                   BLENDSERVE_CHUNK_REQUESTS="32")
    d.start("scheduler")
    d.wait_ready()
    try:
        pid = d.procs["scheduler"].pid
        base = rss_kb(pid, "VmRSS")
        t0 = time.time()
        with sessions.begin() as s:
            s.execute(update(Batch).where(Batch.id == "batch_bench").values(status="in_progress",
                                                                             in_progress_at=int(t0)))
        while True:
            with sessions() as s:
                if s.scalar(select(func.count()).select_from(Chunk)):
                    break
            time.sleep(0.02)
        first = time.time() - t0
        res = {"requests": len(ps), "prompt_tokens": int(sum(map(len, ps))),
               "seconds_to_first_claimable_chunk": round(first, 2),
               "scheduler_peak_rss_growth_mb": round((rss_kb(pid, "VmHWM") - base) / 1024, 1),
               "scheduler_peak_rss_mb": round(rss_kb(pid, "VmHWM") / 1024, 1)}
        print(json.dumps(res))
    finally:
        d.stop()


if __name__ == "__main__":
    main()
