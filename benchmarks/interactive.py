"""Interactive latency beside a running batch, and the N_max / T_max curve.

One real deployment (API, scheduler, one CPU worker, SmolLM2). Phases, each
--window seconds, short streamed chats arriving as a Poisson process:

1. idle: chats alone at each rate (--rates): time to first token and end to end, p50/p99;
2. solo: a --batch-requests batch alone: its tokens/s (from the job table: results finished in the window);
3. beside: the same batch still running, chats at each rate: latency, and the batch's tokens/s in the window;
4. sweep: at --sweep-rate, the worker restarted with each T_max (--tmax, ms): p99 latency and tokens/s.

Or, with --completion N: chats alone at --completion-rate for --window seconds (the idle
figure), then --repeats pairs of an N-request batch run to completion alone and with chats at
--completion-rate throughout: the batch's run phase each way (its throughput, without the
noise of results finishing in waves) and the chats' latencies beside it.

    PYTHONPATH=. .venv/bin/python benchmarks/interactive.py --window 30

Writes benchmarks/results/interactive-<time>.json and a PNG of the sweep beside it.
"""
from __future__ import annotations

import argparse
import json
import random
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from sqlalchemy import func, select

from blendserve.core.config import SMOLLM2, Settings
from blendserve.core.db import make_engine, make_sessionmaker
from blendserve.core.models import Batch, Request
from blendserve.core.served import smollm2_checkpoint
from tests.harness.deployment import Deployment, jsonl

TOPICS = ["the sea", "a library", "autumn", "a train station", "bread", "the moon", "a violin", "rain"]


def batch_rows(n: int, seed: int = 0, first: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(first, first + n):
        topic = rng.choice(TOPICS)
        rows.append({"custom_id": f"b{i}", "method": "POST", "url": "/v1/chat/completions",
                     # Lengths spread out (not a few fixed ones), so results finish steadily and a
                     # window's finished tokens measure the batch's rate rather than its waves.
                     "body": {"model": SMOLLM2, "max_tokens": rng.randint(24, 160), "temperature": 0,
                              "messages": [{"role": "user", "content": f"Write about {topic}, note {i}."}]}})
    return rows


def chats(d: Deployment, rate: float, window: float, seed: int, until: Callable[[], bool] | None = None) -> dict:
    """Poisson arrivals of short streamed chats for `window` seconds (or until `until()`); TTFT and end-to-end
    latencies."""
    client, rng = d.client(), random.Random(seed)
    ttft: list[float] = []
    e2e: list[float] = []
    tokens = [0]
    lock = threading.Lock()

    def one(i: int) -> None:
        t0 = time.perf_counter()
        first = None
        stream = client.chat.completions.create(
            model=SMOLLM2, max_tokens=24, temperature=0, stream=True, stream_options={"include_usage": True},
            messages=[{"role": "user", "content": f"In one sentence, what is {rng.choice(TOPICS)}? ({i})"}])
        for chunk in stream:
            if first is None and chunk.choices and chunk.choices[0].delta.content:
                first = time.perf_counter() - t0
            if chunk.usage:
                with lock:
                    tokens[0] += chunk.usage.total_tokens
        with lock:
            ttft.append(first if first is not None else time.perf_counter() - t0)
            e2e.append(time.perf_counter() - t0)

    threads, t_end, i = [], time.time() + window, 0
    while not until() if until is not None else time.time() < t_end:
        t = threading.Thread(target=one, args=(i,))
        t.start()
        threads.append(t)
        i += 1
        time.sleep(rng.expovariate(rate))
    for t in threads:
        t.join()
    def q(xs: list[float], p: float) -> float | None:
        return round(float(np.percentile(xs, p)) * 1e3, 1) if xs else None

    return {"rate": rate, "requests": len(e2e), "ttft_p50_ms": q(ttft, 50), "ttft_p99_ms": q(ttft, 99),
            "e2e_p50_ms": q(e2e, 50), "e2e_p99_ms": q(e2e, 99), "interactive_tokens": tokens[0]}


def batch_rate(sessions, t0: float, t1: float) -> float:
    """Prompt + completion tokens of batch results finished in [t0, t1), per second."""
    with sessions() as s:
        n = s.scalar(select(func.coalesce(func.sum(Request.prompt_tokens + Request.completion_tokens), 0))
                     .where(Request.finished_at >= t0, Request.finished_at < t1, Request.status == "completed"))
    return round(float(n) / (t1 - t0), 1)


def batch_run_s(sessions, batch_id: str) -> float:
    """The batch's run phase from the job table: first request running -> last result."""
    with sessions() as s:
        first = s.scalar(select(Batch.first_run_at).where(Batch.id == batch_id))
        last = s.scalar(select(func.max(Request.finished_at)).where(Request.batch_id == batch_id))
    return round(last - first, 2)


def completion(d: Deployment, sessions, n: int, rate: float, first: int) -> dict:
    """A batch of n requests run to completion, with chats at `rate` per second throughout (0: none):
    its run phase, a steadier measure of the batch's throughput than a window's finished results."""
    c = d.client()
    f = c.files.create(file=("batch.jsonl", jsonl(batch_rows(n, seed=first, first=first))), purpose="batch")
    b = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")

    def done() -> bool:
        return c.batches.retrieve(b.id).status in ("completed", "failed", "cancelled", "expired")

    point = chats(d, rate, 0, seed=first, until=done) if rate else {"rate": 0}
    while not done():
        time.sleep(1.0)
    point["batch_run_s"] = batch_run_s(sessions, b.id)
    print(json.dumps(point), flush=True)
    return point


def restart_worker(d: Deployment, tmax_ms: float) -> None:
    d.signal("worker", 15)
    d.env["BLENDSERVE_INTERACTIVE_MAX_WAIT_MS"] = str(tmax_ms)
    d.start("worker")
    d.wait_ready()
    time.sleep(2.0)                         # the API's list of live workers refreshes every second


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch-requests", type=int, default=2000)
    ap.add_argument("--rates", default="1,2,4")
    ap.add_argument("--window", type=float, default=30.0)
    ap.add_argument("--tmax", default="0,10,50,200")
    ap.add_argument("--sweep-rate", type=float, default=2.0)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--completion", type=int, default=0, metavar="N",
                    help="instead of the phases above: a batch of N alone to completion, then another of N with "
                         "chats at --completion-rate throughout, --repeats times (interleaved)")
    ap.add_argument("--completion-rate", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--chunk-requests", type=int, default=Settings().chunk_requests,
                    help="requests per plan chunk (the service's default; the test deployment's default is 4)")
    args = ap.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    path = smollm2_checkpoint(Settings(data_dir=Path(tempfile.gettempdir()) / "bs-bench-models"))
    # The service's own defaults, not tests/harness/deployment.py's test values (3-s leases, 4-request chunks, 50-ms
    # polls): a loaded 2-core machine holds a heartbeat past 3 s, and a claim every 4 requests is a
    # transaction (in each rank's claim thread) competing with the engine for the 2 cores.
    d = Deployment(Path(tempfile.mkdtemp(prefix="bs-interactive-")), "", f"{SMOLLM2}={path}",
                   BLENDSERVE_LEASE_SECONDS="30", BLENDSERVE_CHUNK_REQUESTS=str(args.chunk_requests),
                   BLENDSERVE_POLL_INTERVAL_S="0.2", BLENDSERVE_PLAN_MAX_WAIT_S="1.0")
    report: dict = {"batch_requests": args.batch_requests, "window_s": args.window}
    try:
        d.start_all()                     # inside the try: a start that times out still stops what did start
        sessions = make_sessionmaker(make_engine(Settings(data_dir=d.data_dir).db_url, readonly=True))
        deadline = time.time() + 60
        while True:                       # the first answer proves the API sees the worker
            try:
                d.client().chat.completions.create(model=SMOLLM2, max_tokens=1,
                                                   messages=[{"role": "user", "content": "hi"}])
                break
            except Exception:
                if time.time() > deadline:
                    raise
                time.sleep(0.5)
        if args.completion:
            report = {"completion_requests": args.completion, "rate": args.completion_rate,
                      "idle": chats(d, args.completion_rate, args.window, seed=1), "runs": []}
            for _ in range(args.repeats):
                for rate in (0.0, args.completion_rate):
                    report["runs"].append(completion(d, sessions, args.completion, rate,
                                                     first=10**6 * (1 + len(report["runs"]))))
            solo = sorted(p["batch_run_s"] for p in report["runs"] if not p["rate"])
            beside = sorted(p["batch_run_s"] for p in report["runs"] if p["rate"])
            report["batch_share_of_solo"] = round(solo[len(solo) // 2] / beside[len(beside) // 2], 3)
            return
        report["idle"] = [chats(d, r, args.window, seed=int(r * 10)) for r in rates]
        print(json.dumps(report["idle"]), flush=True)
        c = d.client()
        f = c.files.create(file=("batch.jsonl", jsonl(batch_rows(args.batch_requests))), purpose="batch")
        b = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
        while c.batches.retrieve(b.id).request_counts.completed < 20:
            time.sleep(0.5)
        t0 = time.time()
        time.sleep(args.window)
        report["solo_batch_tokens_per_s"] = batch_rate(sessions, t0, time.time())
        report["beside"] = []
        for r in rates:
            t0 = time.time()
            point = chats(d, r, args.window, seed=int(r * 100))
            point["batch_tokens_per_s"] = batch_rate(sessions, t0, time.time())
            point["batch_share_of_solo"] = round(point["batch_tokens_per_s"] / report["solo_batch_tokens_per_s"], 3)
            report["beside"].append(point)
            print(json.dumps(point), flush=True)
        report["sweep"] = []
        for tmax in (float(x) for x in args.tmax.split(",")):
            restart_worker(d, tmax)
            t0 = time.time()
            point = chats(d, args.sweep_rate, args.window, seed=int(tmax) + 7)
            point["tmax_ms"] = tmax
            point["batch_tokens_per_s"] = batch_rate(sessions, t0, time.time())
            report["sweep"].append(point)
            print(json.dumps(point), flush=True)
        report["batch_final"] = c.batches.retrieve(b.id).request_counts.model_dump()
    finally:
        d.stop()
        args.out.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        if args.completion:
            (args.out / f"interactive-completion-{stamp}.json").write_text(json.dumps(report, indent=1))
            print(json.dumps(report))
    if args.completion:
        return
    (args.out / f"interactive-{stamp}.json").write_text(json.dumps(report, indent=1))
    plot(report["sweep"], args.out / f"interactive-tmax-{stamp}.png", args.sweep_rate)
    print(json.dumps(report))


def plot(sweep: list[dict], out: Path, rate: float) -> None:
    """The T_max sweep as a figure (the `[plot]` extra); the report's JSON is written before it."""
    from benchmarks.plots import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [p["tmax_ms"] for p in sweep]
    ax.plot(xs, [p["e2e_p99_ms"] for p in sweep], "o-", label="interactive p99 end to end (ms)")
    ax.plot(xs, [p["ttft_p99_ms"] for p in sweep], "s-", label="interactive p99 first token (ms)")
    ax.set_xlabel("T_max (ms)")
    ax.set_ylabel("latency (ms)")
    ax2 = ax.twinx()
    ax2.plot(xs, [p["batch_tokens_per_s"] for p in sweep], "^--", color="gray", label="batch tokens/s")
    ax2.set_ylabel("batch tokens/s")
    fig.legend(loc="center right", bbox_to_anchor=(0.85, 0.5), fontsize=8)
    ax.set_title(f"N_max / T_max at {rate:g} chats/s beside a running batch", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
