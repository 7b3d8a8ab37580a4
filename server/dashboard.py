"""What the dashboard shows, computed from the job table: batch progress, workers, and throughput over time.

Kept apart from the route and the template so the figures can be tested
without a browser, and so the page stays a plain server-rendered view.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core.jobs import batch_stats
from core.models import Batch, Chunk, Request, Worker

RECENT_BATCHES = 50
BINS = 30                      # points of the throughput plot


@dataclass
class BatchView:
    id: str
    status: str
    model: str | None
    done: int
    total: int
    tokens_per_s: float
    cached_share: float
    eta_s: float | None        # None: not running, or nothing finished yet to extrapolate from

    @property
    def percent(self) -> float:
        return 100.0 * self.done / self.total if self.total else 0.0


@dataclass
class WorkerView:
    id: str
    model: str
    engine: str
    kv_capacity_tokens: int
    heartbeat_age_s: float
    chunks: list[int]


@dataclass
class Bin:
    start: float
    tokens_per_s: float
    prefill_tokens: int        # prompt tokens computed (not cached): compute-dense work
    decode_tokens: int         # completion tokens: memory-dense work


def batches(s: Session, owner: str | None, now: float) -> list[BatchView]:
    q = select(Batch).order_by(Batch.created_at.desc(), Batch.id.desc()).limit(RECENT_BATCHES)
    rows = s.scalars(q if owner is None else q.where(Batch.owner == owner)).all()
    stats = batch_stats(s, [b.id for b in rows])
    out = []
    for b in rows:
        st = stats[b.id]
        total, done = st.total or b.total, st.completed + st.failed
        started = b.in_progress_at
        ended = b.completed_at or b.cancelled_at or b.expired_at or b.failed_at or b.finalizing_at
        elapsed = ((ended or now) - started) if started else 0.0
        rate = (st.input_tokens + st.output_tokens) / elapsed if elapsed > 0 else 0.0
        eta = elapsed * (total - done) / done if b.status == "in_progress" and done and elapsed > 0 else None
        out.append(BatchView(b.id, b.status, b.model, done, total, rate,
                             st.cached_tokens / st.input_tokens if st.input_tokens else 0.0, eta))
    return out


def workers(s: Session, lease_s: float, now: float) -> list[WorkerView]:
    held: dict[str, list[int]] = {}
    for wid, cid in s.execute(select(Chunk.worker_id, Chunk.id).where(Chunk.status == "claimed")):
        held.setdefault(wid, []).append(cid)
    live = s.scalars(select(Worker).where(Worker.heartbeat_at > now - 10 * lease_s).order_by(Worker.started_at))
    return [WorkerView(w.id, w.model, w.engine, w.kv_capacity_tokens, now - w.heartbeat_at, held.get(w.id, []))
            for w in live]


def timeline(s: Session, owner: str | None, now: float, span_s: float = 600.0) -> list[Bin]:
    """Tokens/s and the compute/memory mix of what finished, in BINS slices of the last span_s seconds."""
    width = span_s / BINS
    start = now - span_s
    slot = func.floor((Request.finished_at - start) / width)
    q = (select(slot, func.sum(Request.prompt_tokens), func.sum(Request.cached_tokens),
                func.sum(Request.completion_tokens))
         .where(Request.status == "completed", Request.finished_at > start).group_by(slot))
    if owner is not None:
        q = q.join(Batch, Batch.id == Request.batch_id).where(Batch.owner == owner)
    bins = [Bin(start + i * width, 0.0, 0, 0) for i in range(BINS)]
    for i, prompt, cached, completion in s.execute(q):
        b = bins[min(int(i), BINS - 1)]
        b.prefill_tokens, b.decode_tokens = int(prompt or 0) - int(cached or 0), int(completion or 0)
        b.tokens_per_s = (int(prompt or 0) + b.decode_tokens) / width
    return bins


def polyline(values: list[float], width: int, height: int, top: float | None = None) -> str:
    """SVG points for values scaled into a width x height box (0 at the bottom, `top` or the peak at the top)."""
    top = top or max(values) or 1.0
    step = width / max(len(values) - 1, 1)
    return " ".join(f"{i * step:.1f},{height - v / top * height:.1f}" for i, v in enumerate(values))


def snapshot(s: Session, owner: str | None, lease_s: float) -> dict:
    now = time.time()
    bins = timeline(s, owner, now)
    mix = [b.prefill_tokens / (b.prefill_tokens + b.decode_tokens) if b.prefill_tokens + b.decode_tokens else 0.0
           for b in bins]
    return {"now": now, "batches": batches(s, owner, now),
            "workers": workers(s, lease_s, now),     # shared machinery, no tenant's data
            "bins": bins, "peak_tokens_per_s": max(b.tokens_per_s for b in bins),
            "throughput_points": polyline([b.tokens_per_s for b in bins], 600, 120),
            "mix_points": polyline(mix, 600, 120, top=1.0)}
