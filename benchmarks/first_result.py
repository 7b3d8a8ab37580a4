"""Create -> first result: how long a small batch waits before its first output line exists, per engine.

A fresh deployment per run (real api, scheduler and worker processes, SQLite, the service's own chunk, lease,
round and poll settings), its worker up and idle before the upload; then one file of --lines lines is
uploaded and a batch created. Times, from the upload's start (the client's clock, the rows' own float stamps):

  created    the batch exists (upload + create calls returned)
  claimed    its first request was handed to an engine (`batches.first_run_at`)
  first      its first result was written (the smallest `requests.finished_at`)

then the batch is cancelled (with --complete: run to the end, and `completed`, its last result, is reported).

    HF_HUB_OFFLINE=1 PYTHONPATH=. .venv/bin/python -m benchmarks.first_result --engines cpu --repeats 3
    scripts/setup_vllm.sh .venv-vllm/bin/python -m benchmarks.first_result --engines vllm --repeats 3
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from sqlalchemy import func, select

from benchmarks.harness import emit
from blendserve.core.config import SMOLLM2, Settings
from blendserve.core.db import make_engine, make_sessionmaker
from blendserve.core.models import Batch, Request
from blendserve.core.served import smollm2_checkpoint
from tests.harness.deployment import Deployment, jsonl, wait_batch

BLIND = Path(__file__).parent / "results" / "blind_input.jsonl"


def _first(sessions, batch_id: str) -> float | None:
    with sessions() as s:
        return s.scalar(select(func.min(Request.finished_at)).where(Request.batch_id == batch_id))


def one_run(rows: list[dict], model: Path, engine: str, worker_args: tuple[str, ...], complete: bool) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="bs-first-"))
    d = Deployment(tmp, "", f"{SMOLLM2}={model}", BLENDSERVE_CHUNK_REQUESTS="32", BLENDSERVE_LEASE_SECONDS="30",
                   BLENDSERVE_PLAN_MAX_WAIT_S="1.0", BLENDSERVE_POLL_INTERVAL_S="0.2")
    if engine == "cpu":
        d.env.pop("LD_PRELOAD", None)        # vLLM's Intel OpenMP is not for torch's CPU build
    for role, extra in (("api", ()), ("scheduler", ()), ("worker", ("--engine", engine, *worker_args))):
        d.start(role, None, *extra)
    try:
        d.wait_ready(timeout=600)
        while f"serving {SMOLLM2}" not in d.log("worker", tail=None):
            assert d.procs["worker"].poll() is None, d.log("worker")
            time.sleep(0.2)
        time.sleep(2.0)                      # idle: the roles' polls backed off, as a worker waiting for work
        c = d.client()
        t0 = time.time()
        f = c.files.create(file=("input.jsonl", jsonl(rows)), purpose="batch")
        b = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
        created = time.time() - t0
        sessions = make_sessionmaker(make_engine(Settings(data_dir=tmp).db_url))
        row = {"engine": engine, "lines": len(rows), "created": round(created, 3)}
        if complete:
            b = wait_batch(c, b.id, timeout=3600, every=0.5)
            assert b.status == "completed" and b.request_counts.completed == len(rows), (b, d.log("worker"))
        deadline = time.time() + 600
        while (first := _first(sessions, b.id)) is None:
            assert time.time() < deadline and d.procs["worker"].poll() is None, d.log("worker")
            time.sleep(0.05)
        with sessions() as s:
            claimed = s.scalar(select(Batch.first_run_at).where(Batch.id == b.id))
            last = s.scalar(select(func.max(Request.finished_at)).where(Request.batch_id == b.id))
        row.update(claimed=round(claimed - t0, 3), first=round(first - t0, 3))
        if complete:
            row["completed"] = round(last - t0, 2)
        else:
            c.batches.cancel(b.id)
        return row
    finally:
        d.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--file", type=Path, default=BLIND, help="a chat batch file (default: blind_input.jsonl)")
    p.add_argument("--lines", type=int, default=200)
    p.add_argument("--engines", nargs="+", default=["cpu"], help="worker engines: cpu, vllm")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--complete", action="store_true", help="run each batch to its end (else cancel it at its first "
                                                            "result)")
    p.add_argument("--out", type=Path, help="append each run's row to this JSONL file")
    args = p.parse_args()
    rows = [json.loads(x) for x in args.file.read_text().splitlines()[:args.lines]]
    model = smollm2_checkpoint(Settings())
    runs: dict[str, list[dict]] = {}
    for _ in range(args.repeats):            # engines interleaved, so drift in the machine's load hits each alike
        for engine in args.engines:
            row = one_run(rows, model, engine, (), args.complete)
            runs.setdefault(engine, []).append(row)
            emit(row, args.out)
    for engine, rs in runs.items():
        keys = ("created", "claimed", "first", *(("completed",) if args.complete else ()))
        med = {k: statistics.median(r[k] for r in rs) for k in keys}
        print(f"{engine}: medians of {len(rs)}: " + ", ".join(f"{k} {v:.2f} s" for k, v in med.items()))


if __name__ == "__main__":
    main()
