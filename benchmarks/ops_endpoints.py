"""Latency of /metrics, /dashboard, /dashboard/batches/{id} and /ready with 10,000 finished requests in the job
table and a long history of planning rounds.

The rounds are written straight into planning_rounds: 100,000 by default, spread over the day the scheduler
keeps (scheduler/rounds.py KEEP_S), about what a round every tick for a day of trickling work leaves. /metrics
reads the newest row per model (it carries the running totals); the dashboard reads the latest rounds.

    PYTHONPATH=. .venv/bin/python benchmarks/ops_endpoints.py
    PYTHONPATH=. .venv/bin/python benchmarks/ops_endpoints.py --requests 500 --rounds 1000     # smoke
"""
import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from sqlalchemy import insert

from blendserve.core.config import Settings
from blendserve.core.db import make_engine
from blendserve.core.models import ROUND_BUCKETS_S, PlanningRound
from blendserve.core.modelstore import build_tiny_model
from tests.harness.deployment import Deployment, chat_lines, jsonl, wait_batch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=100000)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    d = Deployment(tmp / "d", "", f"tiny-llama={build_tiny_model(tmp / 'tiny')}",
                   BLENDSERVE_MAX_REQUESTS_PER_FILE="20000", BLENDSERVE_CHUNK_REQUESTS="32")
    d.start_all()
    try:
        c = d.client()
        rows = chat_lines(args.requests, "tiny-llama", max_tokens=4)
        f = c.files.create(file=("w.jsonl", jsonl(rows)), purpose="batch")
        b = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
        wait_batch(c, b.id, timeout=900)
        rng, now = random.Random(0), time.time()
        with make_engine(Settings(data_dir=tmp / "d").db_url).begin() as conn:     # totals: not read but the newest
            conn.execute(insert(PlanningRound), [
                {"model": "tiny-llama", "started_at": now - 86000.0 * (args.rounds - i) / args.rounds,
                 "duration_s": rng.expovariate(5.0),
                 "requests": rng.randint(1, 5000), "est_seconds": 60.0, "est_compute_s": 30.0, "est_memory_s": 40.0,
                 "est_prefill_tokens": 1e5, "est_decode_tokens": 2e5, "rounds_total": i, "requests_total": i,
                 "seconds_total": 0.1 * i, "buckets_total": [i] * len(ROUND_BUCKETS_S)} for i in range(args.rounds)])
        root = d.base_url.removesuffix("/v1")
        with httpx.Client() as h:
            for path in ("/metrics", "/dashboard", f"/dashboard/batches/{b.id}", "/ready"):
                ts = []
                for _ in range(21):
                    t0 = time.perf_counter()
                    r = h.get(root + path)
                    ts.append(time.perf_counter() - t0)
                    assert r.status_code == 200, (path, r.status_code)
                print(f"{path}: median {statistics.median(ts) * 1e3:.1f} ms, max {max(ts) * 1e3:.1f} ms "
                      "over 21 requests, "
                      f"{len(r.content)} bytes, {args.requests:,} requests and {args.rounds:,} planning rounds "
                      "in the table", flush=True)
    finally:
        d.stop()


if __name__ == "__main__":
    main()
