"""Latency of /metrics, /dashboard and /ready with 10,000 finished requests in the job table (issue 12).

    PYTHONPATH=. .venv/bin/python benchmarks/ops_endpoints.py
"""
import statistics, sys, tempfile, time
from pathlib import Path
import httpx
from core.modelstore import build_tiny_model
from tests.live import Deployment, chat_lines, jsonl, wait_batch
tmp = Path(tempfile.mkdtemp())
d = Deployment(tmp / "d", "", f"tiny-llama={build_tiny_model(tmp / 'tiny')}", BLENDSERVE_MAX_REQUESTS_PER_FILE="20000",
               BLENDSERVE_CHUNK_REQUESTS="32")
d.start_all()
try:
    c = d.client()
    rows = chat_lines(10000, "tiny-llama", max_tokens=4)
    f = c.files.create(file=("w.jsonl", jsonl(rows)), purpose="batch")
    b = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    wait_batch(c, b.id, timeout=900)
    root = d.base_url.removesuffix("/v1")
    with httpx.Client() as h:
        for path in ("/metrics", "/dashboard", "/ready"):
            ts = []
            for _ in range(21):
                t0 = time.perf_counter(); r = h.get(root + path); ts.append(time.perf_counter() - t0)
                assert r.status_code == 200, (path, r.status_code)
            print(f"{path}: median {statistics.median(ts)*1e3:.1f} ms, max {max(ts)*1e3:.1f} ms over 21 requests, "
                  f"{len(r.content)} bytes, 10,000 requests in the table", flush=True)
finally:
    d.stop()
