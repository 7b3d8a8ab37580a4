"""The control plane at cluster scale, with echo engines standing in for GPUs (issue 14).

One PostgreSQL schema, the API, a leading and a standby scheduler, and N echo
ranks (several per worker process), one batch of --requests lines, status polls
at --polls-per-s throughout. Reports, per rank count: results written per
second, claim latency p50/p99 (from the workers' per-claim log lines), time
from `in_progress` to the first claim, planning round durations, finalization
of the output file after the last result, database bytes per request, the
status polls' p50/p99, and each role's peak RSS.

    PYTHONPATH=. .venv/bin/python benchmarks/control_plane.py --requests 100000 --ranks 1,8,32,64

Echo ranks pace like a GPU (BLENDSERVE_ECHO_TOKENS_PER_S per sequence, up to
256 running), so with many ranks the database or this machine's CPUs bind;
each JSON line says which process used the most CPU.
"""
from __future__ import annotations

import argparse
import json
import re
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import sqlalchemy as sa

from benchmarks.harness import rss_kb
from core.db import make_engine, make_sessionmaker
from core.models import Batch, Request
from tests.live import Deployment, pg_schema_url

MODEL = "echo-8b"
CLAIM = re.compile(r"claimed chunk \d+ \(\d+ requests?\) in ([\d.]+) ms")
ROUND = re.compile(r"round ([\d.]+)s")


def write_file(path: Path, n: int, max_tokens: int, seed: int = 0) -> None:
    """Chat lines: 30% behind one of 50 system prompts, the rest distinct; short prompts, fixed outputs."""
    rng = np.random.default_rng(seed)
    systems = [f"You are assistant number {k}. " + "Follow the house style. " * 20 for k in range(50)]
    with open(path, "w") as f:
        for i in range(n):
            msgs = [{"role": "user", "content": f"Request {i}: summarise item {rng.integers(1 << 30)}."}]
            if rng.random() < 0.3:
                msgs.insert(0, {"role": "system", "content": systems[rng.integers(50)]})
            f.write(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
                                "body": {"model": MODEL, "messages": msgs, "max_tokens": max_tokens}}) + "\n")


def poll(url: str, per_s: float, stop: threading.Event, out: list[float]) -> None:
    """Open-loop status polls: one every 1/per_s seconds, each latency recorded."""
    with httpx.Client(timeout=10) as c:
        nxt = time.perf_counter()
        while not stop.is_set():
            t0 = time.perf_counter()
            c.get(url)
            out.append(time.perf_counter() - t0)
            nxt += 1.0 / per_s
            time.sleep(max(0.0, nxt - time.perf_counter()))


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0


def run(tokenizer_model: Path, requests: int, ranks: int, per_proc: int, polls_per_s: float, max_tokens: int,
        data: Path) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="bs-cp-"))
    url = pg_schema_url()
    d = Deployment(tmp, url, f"{MODEL}={tokenizer_model}", BLENDSERVE_MAX_REQUESTS_PER_FILE=str(requests),
                   BLENDSERVE_MAX_FILE_BYTES=str(1 << 31), BLENDSERVE_CHUNK_REQUESTS="256",
                   BLENDSERVE_LEASE_SECONDS="30", BLENDSERVE_POLL_INTERVAL_S="0.1", BLENDSERVE_PLANNER="fcfs",
                   BLENDSERVE_DB_POOL_SIZE="4")     # 4 worker processes x <= 12 connections: PostgreSQL's 100 suffice
    d.start("api")
    d.start("scheduler", "scheduler")
    d.start("scheduler", "standby")
    left, i = ranks, 0
    while left:
        k = min(per_proc, left)
        d.start("worker", f"worker{i}", "--engine", "echo", "--ranks", str(k))
        left, i = left - k, i + 1
    d.wait_ready()
    try:
        c = d.client()
        with open(data, "rb") as f:
            fid = c.files.create(file=("cp.jsonl", f), purpose="batch").id
        t_create = time.time()
        b = c.batches.create(input_file_id=fid, endpoint="/v1/chat/completions", completion_window="24h")
        lat: list[float] = []
        stop = threading.Event()
        poller = threading.Thread(target=poll, args=(f"{d.base_url}/batches/{b.id}", polls_per_s, stop, lat))
        poller.start()
        cpu0 = {n: cpu_s(p.pid) for n, p in d.procs.items()}
        while (b := c.batches.retrieve(b.id)).status not in ("completed", "failed", "expired", "cancelled"):
            time.sleep(1.0)
        stop.set()
        poller.join()
        assert b.status == "completed", b
        cpu = {n: round(cpu_s(p.pid) - cpu0[n], 1) for n, p in d.procs.items()}
        rss = {n: rss_kb(p.pid) // 1024 for n, p in d.procs.items()}
        eng = make_engine(url, readonly=True)
        with make_sessionmaker(eng)() as s:
            bt = s.get(Batch, b.id)
            first, last, n_done = s.execute(sa.select(sa.func.min(Request.finished_at), sa.func.max(Request.finished_at),
                                                      sa.func.count()).where(Request.batch_id == b.id,
                                                                             Request.status == "completed")).one()
            db_bytes = s.scalar(sa.text("SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN "
                                        "pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() "
                                        "AND c.relkind = 'r'"))
        eng.dispose()
        claims = [float(m) for n in d.procs if n.startswith("worker") for m in CLAIM.findall(d.log(n, tail=None))]
        rounds = [float(m) for m in ROUND.findall(d.log("scheduler", tail=None) + d.log("standby", tail=None))]
        return {
            "requests": requests, "ranks": ranks, "worker_processes": i, "polls_per_s": polls_per_s,
            "results_per_s": round(n_done / max(last - bt.first_run_at, 1e-9), 1),
            "claim_ms_p50": round(float(np.percentile(claims, 50)), 1) if claims else None,
            "claim_ms_p99": round(float(np.percentile(claims, 99)), 1) if claims else None,
            "claims": len(claims),
            "first_claim_after_in_progress_s": round(bt.first_run_at - bt.in_progress_at, 2),
            "validation_s": round(bt.in_progress_at - t_create, 2),
            "planning_rounds": len(rounds), "planning_round_s_max": max(rounds) if rounds else None,
            "finalize_after_last_result_s": round(bt.completed_at - last, 1),
            "db_bytes_per_request": round(db_bytes / requests),
            "poll_ms_p50": round(float(np.percentile(lat, 50)) * 1e3, 1),
            "poll_ms_p99": round(float(np.percentile(lat, 99)) * 1e3, 1),
            "cpu_s": cpu, "peak_rss_mb": rss, "busiest": max(cpu, key=cpu.get),
            "first_result_s": round(first - bt.first_run_at, 2),
        }
    finally:
        d.stop()


def main() -> None:
    from core.config import SMOLLM2, Settings
    from core.served import model_paths

    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--ranks", default="1,8,32,64")
    ap.add_argument("--ranks-per-process", type=int, default=16)
    ap.add_argument("--polls-per-s", type=float, default=50.0)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/control_plane.jsonl"))
    args = ap.parse_args()
    tokenizer_model = model_paths(Settings())[SMOLLM2]      # its tokenizer and config; echo loads no weights
    data = Path(tempfile.mkdtemp(prefix="bs-cp-data-")) / "cp.jsonl"
    write_file(data, args.requests, args.max_tokens)
    for ranks in map(int, args.ranks.split(",")):
        r = run(tokenizer_model, args.requests, ranks, args.ranks_per_process, args.polls_per_s, args.max_tokens, data)
        print(json.dumps(r), flush=True)
        with open(args.out, "a") as f:
            f.write(json.dumps({"at": time.strftime("%Y-%m-%d %H:%M"), **r}) + "\n")


if __name__ == "__main__":
    main()
