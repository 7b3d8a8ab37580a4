"""The control plane at cluster scale, with echo engines standing in for GPUs.

One PostgreSQL schema, the API, a leading and a standby scheduler, and N echo
ranks (several per worker process); --batches batches of --requests lines each,
created --every seconds apart; status polls of the newest batch at
--polls-per-s throughout (open loop, each timed from when it was due, on a
light asyncio client: benchmarks/pollers.py). Reports, per rank count: results written per second,
claim latency p50/p99 (from the workers' per-claim log lines), time from
`in_progress` to the first claim, planning round durations, finalization of
the output file after the batch's last result, whether every custom_id came
out exactly once, database bytes per request, the status polls' p50/p99, and
each role's CPU seconds and peak RSS, and CPU seconds per 1,000 results by role, PostgreSQL's
backends included (robust to a shared machine, where the wall-clock rate is not).
Lines go to benchmarks/results/control_plane.jsonl.
Figures taken from the batch's own timestamps (validation, finalization) have a resolution
of 1 s: the OpenAI object's times are integer epoch seconds.

Regime. By default an echo rank paces like one GPU serving an 8B model: up to 256
sequences running, each emitting 45 tokens/s (lognormal around it), 256 tokens per
request (--max-tokens), so a request takes about 5.8 s and a rank finishes about 44
results/s; 64 ranks demand about 2,800/s, inside the 1,000-2,500 requests/s a 64-GPU
cluster finishes (about 11,000 output tokens/s per GPU: batch serving of an 8B model
on one H100-class GPU). The control plane must keep up with that demand. A saturated
run (ranks flat out, far beyond any GPU: --max-tokens 16 --echo-tokens-per-s 50, about
800 results/s a rank, 51,000/s demanded at 64 ranks) shows instead where this machine's
2 cores bind. Each JSON line gives the demand (`demand_results_per_s`) beside the rate.

    # one batch of 1,000,000 requests at 64 ranks
    PYTHONPATH=. .venv/bin/python benchmarks/control_plane.py --requests 1000000 --ranks 64
    # rank scaling, requests scaled with ranks so each run lasts a few minutes
    PYTHONPATH=. .venv/bin/python benchmarks/control_plane.py --requests 10000,80000,300000 --ranks 1,8,32
    # 200 batches of 5,000 arriving 2 s apart, 64 ranks
    PYTHONPATH=. .venv/bin/python benchmarks/control_plane.py --requests 5000 --batches 200 --every 2 --ranks 64
    # the scheduler and API on cores of their own, as in a cluster (on 2 shared cores: the workers at nice 10)
    PYTHONPATH=. .venv/bin/python benchmarks/control_plane.py --requests 200000 --ranks 64 --worker-nice 10
    # saturated: the CPU bound of the machine
    PYTHONPATH=. .venv/bin/python benchmarks/control_plane.py --requests 300000 --ranks 64 --max-tokens 16 \
        --echo-tokens-per-s 50

Each JSON line says which process used the most CPU.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import sqlalchemy as sa

from benchmarks.harness import rss_kb
from benchmarks.pollers import Pollers
from blendserve.core.db import make_engine, make_sessionmaker
from blendserve.core.models import Batch, Request
from tests.harness.deployment import Deployment, pg_schema_url

MODEL = "echo-8b"
TERMINAL = ("completed", "failed", "expired", "cancelled")
CLAIM = re.compile(r"claimed chunk \d+ \(\d+ requests?\) in ([\d.]+) ms")
# What a claim was made of (blendserve/worker/ranks.py Claims.timing): waiting for a sibling rank's claim, the
# transaction, and the transaction's CPU on the claiming thread (the rest of it: PostgreSQL, the GIL, a core).
CLAIM_PARTS = re.compile(r"\(sibling wait ([\d.]+), transaction ([\d.]+), its CPU ([\d.]+)\)")
# How long the engine's loop waited for each chunk (blendserve/worker/service.py: chunks are claimed ahead).
ENGINE_WAIT = re.compile(r"the engine waited ([\d.]+) ms")
ROUND = re.compile(r"round ([\d.]+)s")
AHEAD_EMPTY = "the claim made ahead found no chunk ready"     # planning fell behind the ranks, or the end
# The echo engine's own simulation (blendserve/worker/engines/echo.py): its CPU is the stand-in's, not the
# control plane's; each engine logs its running total every 10 s.
NOT_ROLES = ("postgres_server", "echo_engines")     # a bound on postgres; a part of the workers' figure
ECHO_CPU = re.compile(r"echo engine ([0-9a-f]+): its simulation used ([\d.]+) CPU-s")


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


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0


def pg_server_cpu_s() -> float:
    """CPU seconds of the whole PostgreSQL server on this machine so far: every live postgres process, plus
    what the postmaster reaped from backends that ended (connections a pool closed count too). Other
    users of the server are included: a bound on this deployment's share, next to `pg_backends`."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name, rest = text[text.index("(") + 1:text.rindex(")")], text.rsplit(")", 1)[1].split()
        if name == "postgres" or name.startswith("postgres:"):
            total += (int(rest[11]) + int(rest[12]) + int(rest[13]) + int(rest[14])) / 100.0
    return total


def pg_backends(url: str, app: str) -> dict[int, float]:
    """CPU seconds of each PostgreSQL backend serving this deployment (connections named `app`), by pid.

    Read from /proc (PostgreSQL runs on this machine): the backends of other users of the
    server are left out, so the figure is this deployment's whatever else runs beside it.
    """
    eng = make_engine(url, readonly=True)
    with eng.connect() as c:
        pids = c.scalars(sa.text("SELECT pid FROM pg_stat_activity WHERE application_name = :a"), {"a": app}).all()
    eng.dispose()
    out = {}
    for pid in pids:
        try:
            out[pid] = cpu_s(pid)
        except OSError:         # the backend ended meanwhile
            pass
    return out


@dataclass(frozen=True)
class Pace:
    """How fast an echo rank serves: `tokens_per_s` per sequence, up to `max_running` at once."""
    tokens_per_s: float
    max_running: int
    max_tokens: int

    def results_per_s(self, ranks: int) -> float:
        """What `ranks` ranks finish a second when never short of work (the engine's rate is lognormal,
        sigma 0.2, around tokens_per_s: a request's mean time is max_tokens / tokens_per_s * e^0.02)."""
        return ranks * self.max_running / (self.max_tokens / self.tokens_per_s * math.exp(0.02))


def renice(pid: int, nice: int) -> None:
    """Every thread of `pid` at `nice` (Linux keeps a nice value per thread; threads started later inherit it)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.setpriority(os.PRIO_PROCESS, int(tid), nice)


def run(tokenizer_model: Path, files: list[Path], every_s: float, ranks: int, per_proc: int, polls_per_s: float,
        plan_window: int, pace: Pace, worker_nice: int = 0) -> dict:
    """One deployment; the batches of `files` created `every_s` apart (all at once when 0); until all end."""
    tmp = Path(tempfile.mkdtemp(prefix="bs-cp-"))
    app = f"bs_cp_{tmp.name[-8:]}"
    url = pg_schema_url() + f"&application_name={app}"
    lines = [sum(1 for _ in open(f, "rb")) for f in files]
    d = Deployment(tmp, url, f"{MODEL}={tokenizer_model}", BLENDSERVE_MAX_REQUESTS_PER_FILE=str(max(lines)),
                   BLENDSERVE_MAX_FILE_BYTES=str(1 << 31), BLENDSERVE_CHUNK_REQUESTS="256",
                   BLENDSERVE_LEASE_SECONDS="30", BLENDSERVE_POLL_INTERVAL_S="0.1", BLENDSERVE_PLANNER="fcfs",
                   BLENDSERVE_PLAN_WINDOW=str(plan_window),
                   BLENDSERVE_DB_POOL_SIZE="4",     # 4 worker processes x <= 12 connections: PostgreSQL's 100 suffice
                   BLENDSERVE_ECHO_TOKENS_PER_S=str(pace.tokens_per_s),
                   BLENDSERVE_ECHO_MAX_RUNNING=str(pace.max_running),
                   TOKENIZERS_PARALLELISM="true")   # as in production (the test harness turns it off)
    d.start("api")
    d.start("scheduler", "scheduler")
    d.start("scheduler", "standby")
    left, i = ranks, 0
    while left:
        k = min(per_proc, left)
        d.start("worker", f"worker{i}", "--engine", "echo", "--ranks", str(k))
        left, i = left - k, i + 1
    try:
        # inside: one that does not come up is stopped too; 600 s: 64 ranks start slowly on 2 busy cores
        d.wait_ready(600)
        for n, p in d.procs.items():
            if worker_nice and n.startswith("worker"):
                renice(p.pid, worker_nice)
        c = d.client()
        pollers: list[tuple[Pollers, threading.Thread]] = []     # one per batch, for its first minutes
        cpu0 = {n: cpu_s(p.pid) for n, p in d.procs.items()}
        pg0, server0 = pg_backends(url, app), pg_server_cpu_s()
        t0, ids, created = time.time(), [], {}
        for k, f in enumerate(files):
            time.sleep(max(0.0, t0 + k * every_s - time.time()))
            with open(f, "rb") as fh:
                fid = c.files.create(file=(f.name, fh), purpose="batch").id
            b = c.batches.create(input_file_id=fid, endpoint="/v1/chat/completions", completion_window="24h")
            ids.append(b.id)
            created[b.id] = time.time()
            if pollers:             # polls go to the newest batch: what a client watches
                pollers[-1][0].stop.set()
            poller = Pollers("127.0.0.1", d.port, f"/v1/batches/{b.id}", polls_per_s, 10**9, connections=8)
            pollers.append((poller, poller.start()))
        done: dict[str, object] = {}
        while len(done) < len(ids):     # oldest unfinished first: about one extra poll a second, not 200
            for bid in ids:
                if bid in done:
                    continue
                if (b := c.batches.retrieve(bid)).status not in TERMINAL:
                    break
                done[bid] = b
            time.sleep(1.0)
        for poller, thread in pollers:
            poller.stop.set()
            thread.join(30)
        lat = [ms / 1e3 for poller, _ in pollers for ms in poller.latencies_ms]
        poll_errors = sum(poller.errors for poller, _ in pollers)
        assert all(b.status == "completed" for b in done.values()), [b for b in done.values()
                                                                     if b.status != "completed"][:1]
        cpu = {n: round(cpu_s(p.pid) - cpu0[n], 1) for n, p in d.procs.items()}
        time.sleep(2.0)         # the engines' streams end once no chunk is left, each logging its total
        cpu["echo_engines"] = round(echo_cpu_s(d), 1)
        # Backends that started during the run count from zero; one that ended before this read is missed
        # (the pools keep theirs open, so few do).
        cpu["postgres"] = round(sum(v - pg0.get(pid, 0.0) for pid, v in pg_backends(url, app).items()), 1)
        cpu["postgres_server"] = round(pg_server_cpu_s() - server0, 1)
        load = os.getloadavg()
        rss = {n: rss_kb(p.pid) // 1024 for n, p in d.procs.items()}
        once = all(exactly_once(c, done[bid].output_file_id, n) for bid, n in zip(ids, lines))
        eng = make_engine(url, readonly=True)
        with make_sessionmaker(eng)() as s:
            bts = {b.id: b for b in s.scalars(sa.select(Batch))}
            first, last, n_done = s.execute(
                sa.select(sa.func.min(Request.finished_at), sa.func.max(Request.finished_at), sa.func.count())
                .where(Request.status == "completed")).one()
            lasts = dict(s.execute(sa.select(Request.batch_id, sa.func.max(Request.finished_at))
                                   .group_by(Request.batch_id)).all())
            db_bytes = s.scalar(sa.text("SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN "
                                        "pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() "
                                        "AND c.relkind = 'r'"))
        eng.dispose()
        claims = [float(m) for n in d.procs if n.startswith("worker") for m in CLAIM.findall(d.log(n, tail=None))]
        parts = np.array([[float(x) for x in m] for n in d.procs if n.startswith("worker")
                          for m in CLAIM_PARTS.findall(d.log(n, tail=None))]).reshape(-1, 3)
        waits = [float(m) for n in d.procs if n.startswith("worker") for m in ENGINE_WAIT.findall(d.log(n, tail=None))]
        ahead_empty = sum(d.log(n, tail=None).count(AHEAD_EMPTY) for n in d.procs if n.startswith("worker"))
        rounds = [float(m) for m in ROUND.findall(d.log("scheduler", tail=None) + d.log("standby", tail=None))]
        start = min(b.first_run_at for b in bts.values())
        wait = [bts[b].first_run_at - bts[b].in_progress_at for b in ids]
        fin = [bts[b].completed_at - lasts[b] for b in ids]
        turn = [bts[b].completed_at - created[b] for b in ids]
        pct = lambda xs, q: round(float(np.percentile(xs, q)), 2)  # noqa: E731
        return {
            "requests": sum(lines), "batches": len(ids), "every_s": every_s, "ranks": ranks,
            "worker_processes": i, "polls_per_s": polls_per_s, "plan_window": plan_window,
            "echo_tokens_per_s": pace.tokens_per_s, "echo_max_running": pace.max_running, "worker_nice": worker_nice,
            "max_tokens": pace.max_tokens, "demand_results_per_s": round(pace.results_per_s(ranks)),
            "results_per_s": round(n_done / max(last - start, 1e-9), 1),
            "claim_ms_p50": pct(claims, 50) if claims else None, "claim_ms_p99": pct(claims, 99) if claims else None,
            "claims": len(claims), "claims_ahead_empty": ahead_empty,
            **{f"claim_{part}_ms_p{q}": pct(parts[:, k], q) if len(parts) else None
               for k, part in enumerate(("sibling_wait", "transaction", "transaction_cpu")) for q in (50, 99)},
            "engine_wait_for_chunk_ms_p50": pct(waits, 50) if waits else None,
            "engine_wait_for_chunk_ms_p99": pct(waits, 99) if waits else None,
            "first_claim_after_in_progress_s_max": round(max(wait), 2),
            "first_claim_after_in_progress_s_p50": pct(wait, 50),
            "validation_s_max": round(max(bts[b].in_progress_at - created[b] for b in ids), 2),
            "planning_rounds": len(rounds), "planning_round_s_max": max(rounds) if rounds else None,
            "finalize_after_last_result_s_max": round(max(fin), 1),
            "batch_turnaround_s_p50": pct(turn, 50), "batch_turnaround_s_max": round(max(turn), 1),
            "every_custom_id_once": once,
            "db_bytes_per_request": round(db_bytes / sum(lines)),
            "poll_ms_p50": round(float(np.percentile(lat, 50)) * 1e3, 1),
            "poll_ms_p99": round(float(np.percentile(lat, 99)) * 1e3, 1), "polls": len(lat), "poll_errors": poll_errors,
            "cpu_s": cpu, "peak_rss_mb": rss, "busiest": max((k for k in cpu if k not in NOT_ROLES), key=cpu.get),
            # CPU seconds per 1,000 results, by role (every worker process together): robust to a shared
            # machine, where the wall-clock rate is not.
            "cpu_s_per_1k": per_1k(cpu, n_done),
            "load_avg_end": [round(x, 1) for x in load], "nice": os.nice(0),
            "first_result_s": round(first - start, 2), "wall_s": round(time.time() - t0, 1),
        }
    finally:
        d.stop()
        drop(url, tmp)


def echo_cpu_s(d: Deployment) -> float:
    """CPU seconds the echo engines' own simulation used, from each engine's latest report (idle before the
    first batch: nothing to subtract)."""
    latest: dict[str, float] = {}
    for n in d.procs:
        if n.startswith("worker"):
            for engine, v in ECHO_CPU.findall(d.log(n, tail=None)):
                latest[f"{n}:{engine}"] = float(v)
    return sum(latest.values())


def drop(url: str, data_dir: Path) -> None:
    """Free what a run stored (a 1,000,000-request run leaves gigabytes): its schema and its files;
    the processes' logs stay in `data_dir`/logs."""
    schema = url.split("search_path%3D", 1)[1].split("&", 1)[0]
    eng = sa.create_engine(url.split("?", 1)[0])
    with eng.begin() as c:
        c.execute(sa.text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
    eng.dispose()
    for p in data_dir.iterdir():
        if p.name != "logs":
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def per_1k(cpu: dict[str, float], results: int) -> dict[str, float]:
    roles: dict[str, float] = {}
    for name, v in cpu.items():
        role = "workers" if name.startswith("worker") else name
        roles[role] = roles.get(role, 0.0) + v
    roles["total"] = sum(v for k, v in roles.items() if k not in NOT_ROLES)
    if "echo_engines" in roles:     # inside the workers' figure: what is left is the control plane's
        roles["workers_without_echo"] = roles["workers"] - roles["echo_engines"]
        roles["total_without_echo"] = roles["total"] - roles["echo_engines"]
    return {k: round(v * 1000 / max(results, 1), 3) for k, v in roles.items()}


def exactly_once(c, file_id: str, n: int) -> bool:
    """The output file holds every custom_id r0..r{n-1} exactly once (streamed, never all in memory)."""
    seen = bytearray(n)
    with c.files.with_streaming_response.content(file_id) as resp:
        for line in resp.iter_lines():
            if line:
                k = int(json.loads(line)["custom_id"][1:])
                if seen[k]:
                    return False
                seen[k] = 1
    return all(seen)


def main() -> None:
    from blendserve.core.config import Settings
    from blendserve.core.served import smollm2_checkpoint

    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", default="100000",
                    help="requests per batch: one count, or one per rank count (as many as --ranks)")
    ap.add_argument("--batches", type=int, default=1)
    ap.add_argument("--every", type=float, default=0.0, help="seconds between batch arrivals")
    ap.add_argument("--ranks", default="1,8,32,64")
    ap.add_argument("--ranks-per-process", type=int, default=16)
    ap.add_argument("--polls-per-s", type=float, default=50.0)
    ap.add_argument("--max-tokens", type=int, default=256, help="every request's max_tokens (its reply length)")
    ap.add_argument("--echo-tokens-per-s", type=float, default=45.0, help="each running sequence's token rate")
    ap.add_argument("--echo-max-running", type=int, default=256, help="sequences a rank runs at once")
    ap.add_argument("--plan-window", type=int, default=32768)
    ap.add_argument("--worker-nice", type=int, default=0,
                    help="run the echo workers at this nice value: on a machine where every role shares 2 cores, "
                         "it models a scheduler (and API) on cores of their own, as in a cluster")
    ap.add_argument("--label", default="", help="a note stored with each line (which code, before/after)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/control_plane.jsonl"))
    args = ap.parse_args()
    rank_counts = [int(r) for r in args.ranks.split(",")]
    counts = [int(n) for n in args.requests.split(",")]
    if len(counts) == 1:
        counts *= len(rank_counts)
    if len(counts) != len(rank_counts):
        ap.error("--requests takes one count or one per rank count")
    pace = Pace(args.echo_tokens_per_s, args.echo_max_running, args.max_tokens)
    tokenizer_model = smollm2_checkpoint(Settings())      # its tokenizer and config; echo loads no weights
    data = Path(tempfile.mkdtemp(prefix="bs-cp-data-"))
    for ranks, n in zip(rank_counts, counts):
        files = []
        for k in range(args.batches):
            files.append(data / f"cp{n}-{k}.jsonl")
            if not files[-1].exists():
                write_file(files[-1], n, args.max_tokens, seed=k)
        r = run(tokenizer_model, files, args.every, ranks, args.ranks_per_process, args.polls_per_s,
                args.plan_window, pace, args.worker_nice)
        print(json.dumps(r), flush=True)
        with open(args.out, "a") as f:
            f.write(json.dumps({"at": time.strftime("%Y-%m-%d %H:%M"), "label": args.label, **r}) + "\n")
    shutil.rmtree(data, ignore_errors=True)

if __name__ == "__main__":
    main()
