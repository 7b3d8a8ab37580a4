"""What the service benchmarks share: one JSONL workload through a real deployment (separate api, scheduler
and worker processes), the figures read back from the job table, a process tree's CPU seconds, and one way to
report a run's row.

Two runs of a workload: ``run_service`` (any engine, the deployment's test defaults, token and per-worker
figures) and ``run_service_way`` (one engine and planner with the service's own chunk, lease and round
settings, run phase and CPU seconds beside vLLM's ``run_batch``; benchmarks/vllm_vs_run_batch.py's ways b-d).
"""
from __future__ import annotations

import json
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil
from sqlalchemy import func, select

from blendserve.core.config import SMOLLM2, Settings
from blendserve.core.db import make_engine, make_sessionmaker
from blendserve.core.models import Batch, Chunk, Request
from tests.harness.deployment import Deployment, jsonl, wait_batch


def emit(row: dict, path: Path | None = None) -> None:
    """Print a run's row as one JSON line and, with ``path``, append it there: every benchmark's results file
    is these lines, so a run stopped at a deadline keeps what it measured."""
    line = json.dumps(row)
    print(line, flush=True)
    if path:
        with path.open("a") as f:
            f.write(line + "\n")


def rss_kb(pid: int, field: str = "VmHWM") -> int:
    """A process's resident memory from /proc (VmRSS now, VmHWM its peak), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


@dataclass
class ServiceRun:
    tokens: int              # prompt + completion tokens
    cached: int              # prompt tokens served from the engine's prefix cache
    prompt: int
    run_s: float             # first claim to last result
    whole_s: float           # batch creation to `completed`
    wait_s: float            # in_progress to first claim
    per_worker_tokens: dict[str, int]
    per_worker_finish_s: dict[str, float]   # each worker's last result, from the batch's first claim

    @property
    def run_tok_s(self) -> float:
        return self.tokens / self.run_s

    @property
    def cached_share(self) -> float:
        return self.cached / self.prompt


def run_service(rows: list[dict], models: str, workers: int = 1, worker_args: tuple[str, ...] = (),
                **env: str) -> ServiceRun:
    tmp = Path(tempfile.mkdtemp(prefix="bs-bench-"))
    d = Deployment(tmp, env.pop("db_url", ""), models, **env)
    d.start("api")
    d.start("scheduler")
    for i in range(workers):
        d.start("worker", f"worker{i}", *worker_args)
    d.wait_ready()
    try:
        c = d.client()
        f = c.files.create(file=("w.jsonl", jsonl(rows)), purpose="batch")
        t0 = time.time()
        b = c.batches.create(input_file_id=f.id, endpoint=rows[0]["url"], completion_window="24h")
        b = wait_batch(c, b.id, timeout=3600)
        whole = time.time() - t0
        assert b.status == "completed", b
        sessions = make_sessionmaker(make_engine(d.env["BLENDSERVE_DATABASE_URL"] or Settings(data_dir=tmp).db_url))
        with sessions() as s:
            bt = s.get(Batch, b.id)
            last = s.scalar(select(func.max(Request.finished_at)).where(Request.batch_id == b.id))
            per_worker = s.execute(
                select(Chunk.worker_id, func.sum(Request.prompt_tokens + Request.completion_tokens),
                       func.max(Request.finished_at))
                .join(Chunk, Chunk.id == Request.chunk_id).where(Request.batch_id == b.id)
                .group_by(Chunk.worker_id)).all()
        return ServiceRun(b.usage.total_tokens, b.usage.input_tokens_details.cached_tokens, b.usage.input_tokens,
                          last - bt.first_run_at, whole, bt.first_run_at - bt.in_progress_at,
                          {w: int(n) for w, n, _ in per_worker}, {w: end - bt.first_run_at for w, _, end in per_worker})
    finally:
        d.stop()


@dataclass
class WayRun:
    """One way's run of a file: the service on an engine and planner, or vLLM's run_batch."""
    way: str
    prompt: int
    completion: int
    cached: int
    run_s: float
    whole_s: float
    cpu_s: float
    first_s: float       # the first result: the upload's start (service) or the process's (run_batch) to it

    @property
    def tok_per_cpu_s(self) -> float:
        return (self.prompt + self.completion) / self.cpu_s

    @property
    def run_tok_s(self) -> float:
        return (self.prompt + self.completion) / self.run_s

    def summary(self) -> dict:
        return {**asdict(self), "run_tok_s": round(self.run_tok_s, 1), "tok_per_cpu_s": round(self.tok_per_cpu_s, 1),
                "cached_share": round(self.cached / self.prompt, 3)}


def tree_cpu_s(pid: int, seen: dict[int, float] | None = None) -> float:
    """User + system CPU-seconds of a process and its descendants.

    With ``seen`` (pid -> last reading, updated here), a descendant that has
    exited since an earlier call still counts with its last reading, so the sum
    never drops when the engine processes exit before their parent.
    """
    seen = {} if seen is None else seen
    try:
        root = psutil.Process(pid)
        for proc in [root, *root.children(recursive=True)]:
            try:
                t = proc.cpu_times()
                seen[proc.pid] = t.user + t.system
            except psutil.NoSuchProcess:
                pass
    except psutil.NoSuchProcess:
        pass
    return sum(seen.values())


def run_service_way(rows: list[dict], model: Path, planner: str, tmp: Path, engine: str = "vllm",
                    worker_args: tuple[str, ...] = (), server_pid: int | None = None) -> WayRun:
    """A fresh deployment whose worker (vLLM, the CPU engine, or the openai engine in front of a server
    whose process is ``server_pid``) is up before the upload; the service's own chunk, lease, round and
    poll settings (the deployment's test defaults poll four times as often). Run phase: the batch's first
    claim to its last result. CPU: the worker's process tree and the server's."""
    d = Deployment(tmp, "", f"{SMOLLM2}={model}", BLENDSERVE_PLANNER=planner, BLENDSERVE_CHUNK_REQUESTS="32",
                   BLENDSERVE_LEASE_SECONDS="30", BLENDSERVE_PLAN_MAX_WAIT_S="1.0", BLENDSERVE_POLL_INTERVAL_S="0.2")
    if engine == "cpu":
        d.env.pop("LD_PRELOAD", None)        # vLLM's Intel OpenMP is not for torch's CPU build
    d.start("api")
    d.start("scheduler")
    d.start("worker", None, "--engine", engine, *worker_args)
    try:
        d.wait_ready(timeout=600)
        while f"serving {SMOLLM2}" not in d.log("worker", tail=None):   # not vLLM's own "for serving" line
            assert d.procs["worker"].poll() is None, d.log("worker")
            time.sleep(0.2)
        c = d.client()
        pids = [d.procs["worker"].pid, *([server_pid] if server_pid else [])]

        def cpu_now() -> float:
            return sum(tree_cpu_s(p) for p in pids)
        t0, cpu0 = time.time(), cpu_now()
        f = c.files.create(file=("input.jsonl", jsonl(rows)), purpose="batch")
        b = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
        b = wait_batch(c, b.id, timeout=3600, every=2.0)   # run phase and whole job come from the database
        cpu = cpu_now() - cpu0
        assert b.status == "completed" and b.request_counts.completed == len(rows), (b, d.log("worker"))
        sessions = make_sessionmaker(make_engine(Settings(data_dir=tmp).db_url))
        with sessions() as s:
            first = s.scalar(select(Batch.first_run_at).where(Batch.id == b.id))
            first_out, last = s.execute(select(func.min(Request.finished_at), func.max(Request.finished_at))
                                        .where(Request.batch_id == b.id)).one()
        u = b.usage
        label = "s" if server_pid else {"blendserve": "b", "fcfs": "c", "dfs": "d"}.get(planner, "f")
        return WayRun(f"{label}: service, {engine} engine, {planner}",
                      u.input_tokens, u.output_tokens, u.input_tokens_details.cached_tokens, last - first, last - t0,
                      cpu, first_out - t0)
    finally:
        d.stop()
