"""Run one JSONL workload through a real deployment (separate api/scheduler/worker processes)
and read the figures every service benchmark reports from the job table."""
from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, select

from core.config import Settings
from core.db import make_engine, make_sessionmaker
from core.models import Batch, Chunk, Request
from tests.live import Deployment, jsonl, wait_batch


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
