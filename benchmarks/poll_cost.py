"""The API's CPU per status poll: CPU-seconds of the API process (utime + stime from /proc) over N polls of
GET /v1/batches/{id} at a fixed rate, with a key (the front door's check included).

One deployment (SQLite, API + scheduler + an echo worker, a tenant key). Four phases, each against a fresh
API process: a batch running (echo engine, long replies) or idle (the batch finished), and the status
cache on (BLENDSERVE_STATUS_CACHE_S default, 0.25 s: most polls are cached) or off (0: every poll reads the
database). The API's own background CPU over a window without polls is measured first in each phase and
taken off. Reports CPU-ms per poll and poll latency p50/p99.

    PYTHONPATH=. .venv/bin/python benchmarks/poll_cost.py --polls 5000 --rate 200
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from benchmarks.pollers import Pollers, cpu_s, pct
from blendserve.core.modelstore import build_tiny_model
from tests.harness.deployment import Deployment, chat_lines, jsonl, wait_batch

KEY = "sk-poll-cost"


def restart_api(d: Deployment, cache_s: str) -> None:
    if "api" in d.procs:
        d.procs["api"].terminate()
        d.procs["api"].wait(30)
    d.env["BLENDSERVE_STATUS_CACHE_S"] = cache_s
    d.start("api")
    d.wait_ready()


def phase(d: Deployment, batch_id: str, polls: int, rate: float, idle_s: float) -> dict:
    pid = d.procs["api"].pid
    warm = Pollers("127.0.0.1", d.port, f"/v1/batches/{batch_id}", rate, int(rate), key=KEY)
    warm.start().join(60)                  # imports, first compiles, pools: not counted
    c0 = cpu_s(pid)
    time.sleep(idle_s)
    background = (cpu_s(pid) - c0) / idle_s
    p = Pollers("127.0.0.1", d.port, f"/v1/batches/{batch_id}", rate, polls, key=KEY)
    c0, t0 = cpu_s(pid), time.perf_counter()
    p.start().join(polls / rate * 3 + 60)
    used, wall = cpu_s(pid) - c0, time.perf_counter() - t0
    lat = p.latencies_ms
    return {"polls": len(lat), "errors": p.errors, "wall_s": round(wall, 2), "api_cpu_s": round(used, 3),
            "background_cpu_per_s": round(background, 4),
            "cpu_ms_per_poll": round((used - background * wall) * 1000 / max(len(lat), 1), 4),
            "cpu_ms_per_poll_gross": round(used * 1000 / max(len(lat), 1), 4),
            "p50_ms": round(pct(lat, 0.5), 2), "p99_ms": round(pct(lat, 0.99), 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--polls", type=int, default=5000)
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--idle-s", type=float, default=5.0, help="window without polls for the API's background CPU")
    ap.add_argument("--out", type=Path, default=None, help="append every phase as a JSON line here")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bs-poll-cost-"))
    run_s = 4 * (args.polls / args.rate + args.idle_s + 15)        # the batch outlasts both running phases
    d = Deployment(tmp / "d", "", f"tiny-llama={build_tiny_model(tmp / 'tiny')}", BLENDSERVE_API_KEYS=f"bench:{KEY}",
                   BLENDSERVE_ECHO_TOKENS_PER_S="4", BLENDSERVE_POLL_INTERVAL_S="0.2",
                   BLENDSERVE_CHUNK_REQUESTS="16", BLENDSERVE_LEASE_SECONDS="30")
    d.start("scheduler")
    d.start("worker", "worker", "--engine", "echo")
    try:
        restart_api(d, "0.25")
        c = d.client(KEY)
        f = c.files.create(file=("w.jsonl", jsonl(chat_lines(64, "tiny-llama", max_tokens=min(1800, int(4 * run_s))))),
                           purpose="batch")
        b = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
        wait_batch(c, b.id, timeout=120, until=("in_progress",))
        results = []
        for state in ("running", "idle"):
            if state == "idle":
                c.batches.cancel(b.id)
                wait_batch(c, b.id, timeout=300)
            for cache_s in ("0.25", "0"):
                restart_api(d, cache_s)
                one = {"batch": state, "status_cache_s": float(cache_s), "load_avg": os.getloadavg()[0],
                       **phase(d, b.id, args.polls, args.rate, args.idle_s)}
                results.append(one)
                print(json.dumps(one), flush=True)
                if args.out:
                    with args.out.open("a") as out:
                        out.write(json.dumps(one) + "\n")
    finally:
        d.stop()


if __name__ == "__main__":
    main()
