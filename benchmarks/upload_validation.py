"""Upload + validation of a large batch file through the real service (SmolLM2 tokenizer).

Measures: upload MB/s (client to API, streamed into the store), validation MB/s
(until the batch leaves `validating`: parse, check every rule, bound each
prompt's tokens, insert the rows), the whole path's MB/s, then the
tokenization that follows while the batch runs (chat template + BPE, until no
row is `queued`), when the first plan chunk exists (claimable: a worker could
start), and the peak RSS growth of the API and scheduler processes.
No worker runs, so tokenization is timed alone.

    .venv/bin/python benchmarks/upload_validation.py --lines 50000 --mb 200
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from benchmarks.harness import rss_kb
from blendserve.core.config import SMOLLM2
from tests.harness.deployment import Deployment, wait_batch

WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly judge "
         "boxing matches in distant northern towns ").split()


def make_file(path: Path, lines: int, target_bytes: int) -> int:
    per_line = target_bytes // lines
    text = " ".join(WORDS * (per_line // 40 + 2))
    with open(path, "w") as f:
        for i in range(lines):
            head = {"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
                    "body": {"model": SMOLLM2, "max_tokens": 16, "messages": [
                        {"role": "system", "content": "You are a careful summariser."},
                        {"role": "user", "content": ""}]}}
            room = per_line - len(json.dumps(head)) - 1
            start = (i * 7) % len(WORDS)     # vary the text so lines differ
            head["body"]["messages"][1]["content"] = f"{i} " + text[start:start + room - len(str(i)) - 1]
            f.write(json.dumps(head) + "\n")
    return path.stat().st_size


def wait_tokenized(data_dir: str) -> tuple[float, float]:
    """When the first plan chunk existed, and when the last queued row got its token ids (SQLite deployment)."""
    from sqlalchemy import func, select

    from blendserve.core.config import Settings
    from blendserve.core.db import make_engine, make_sessionmaker
    from blendserve.core.models import Chunk, Request

    sessions = make_sessionmaker(make_engine(Settings(data_dir=Path(data_dir)).db_url))
    first_chunk = None
    while True:
        with sessions() as s:
            if first_chunk is None and s.scalar(select(func.count()).select_from(Chunk)):
                first_chunk = time.time()
            if first_chunk and not s.scalar(select(func.count()).where(Request.status == "queued")):
                return first_chunk, time.time()
        time.sleep(0.1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=50_000)
    ap.add_argument("--mb", type=float, default=200)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bs-upload-"))
    src = tmp / "big.jsonl"
    size = make_file(src, args.lines, int(args.mb * 1e6))
    from blendserve.core.config import Settings
    from blendserve.core.served import smollm2_checkpoint

    data_dir = Path(os.environ.get("BLENDSERVE_BENCH_DATA", "blendserve-data"))
    model_dir = smollm2_checkpoint(Settings(data_dir=data_dir))
    # A deployment's scheduler tokenizes on every core (the test harness turns that off).
    d = Deployment(tmp / "data", "", f"{SMOLLM2}={model_dir}", BLENDSERVE_MAX_FILE_BYTES=str(size + 1),
                   TOKENIZERS_PARALLELISM="true", BLENDSERVE_PLANNER="fcfs")
    d.start("api")
    d.start("scheduler")
    d.wait_ready()
    try:
        api, sched = d.procs["api"].pid, d.procs["scheduler"].pid
        api0, sched0 = rss_kb(api, "VmRSS"), rss_kb(sched, "VmRSS")
        c = d.client()
        t0 = time.time()
        with open(src, "rb") as fh:
            f = c.files.create(file=("big.jsonl", fh), purpose="batch")
        t_up = time.time() - t0
        b = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
        b = wait_batch(c, b.id, timeout=3600, until=lambda x: x.status != "validating")
        t_all = time.time() - t0
        first_chunk, tokenized = wait_tokenized(d.env["BLENDSERVE_DATA_DIR"])
        tokenized_s = tokenized - t0 - t_all
        mb = size / 1e6
        res = {"bytes": size, "lines": args.lines, "status": b.status, "upload_s": round(t_up, 2),
               "upload_mb_s": round(mb / t_up, 1), "validation_s": round(t_all - t_up, 2),
               "validation_mb_s": round(mb / (t_all - t_up), 1), "total_mb_s": round(mb / t_all, 1),
               "first_chunk_after_in_progress_s": round(first_chunk - t0 - t_all, 2),
               "tokenize_s": round(tokenized_s, 1), "tokenize_mb_s": round(mb / tokenized_s, 1),
               "api_peak_rss_growth_mb": round((rss_kb(api, "VmHWM") - api0) / 1024, 1),
               "scheduler_peak_rss_growth_mb": round((rss_kb(sched, "VmHWM") - sched0) / 1024, 1)}
        print(json.dumps(res))
    finally:
        d.stop()


if __name__ == "__main__":
    main()
