"""What the dashboard shows, computed from the job table: batch progress, workers, and throughput over time.

Kept apart from the route and the template so the figures can be tested
without a browser, and so the page stays a plain server-rendered view.

A running batch is in one of four phases, said as such rather than drawn as
an empty bar: "planning" (some of its requests are not planned yet),
"waiting for a worker" (all planned, none handed to an engine yet: work ahead
of it runs; or no live worker serves its model, which the page then says, as
nothing plans or runs it until one comes), "warming up" (its requests run, none finished: an engine decodes
its sequences together, so the first ones finish after about a max_tokens'
worth of steps), then "running", with progress, from its first finished
request. Results are counted as they are written (blendserve/worker/writes.py, within
LINGER_S of finishing), and the page refreshes its tables every second, so
the first result shows within about a second and a half.

Tokens/s of a batch: its finished requests' tokens over the time since its
first request reached an engine (Batch.first_run_at), not since it turned
in_progress: planning and the wait for a worker are not its speed.

ETA of a running batch: from its observed rate once MIN_OBSERVED of it has
finished: results after its first one over the time since that first one (an
engine runs many of its requests at once, so the first wave lands together
after a warm-up; counting from its first request reaching an engine, a
200-line batch whose first results came after 150 s was given 45 minutes
with seconds to go); before
that, from the latest planning round of its model (blendserve/scheduler/rounds.py: the
policy's estimate of the round's work, which holds the batch's unfinished
requests, so it is when the batch ends at the latest if the estimate holds).
Once that estimate has passed with too few results to extrapolate from, the
ETA says "overdue" rather than nothing (or a made-up figure).
A round that planned fewer requests than the batch has left (a window of a
larger backlog, or the last few lines of an intake) estimated a fragment: its
estimate is scaled by the batch's unfinished requests over the round's, so
the ETA is the batch's and not that fragment's.

Workers: heartbeats come every lease/3 seconds. A worker whose last heartbeat
is older than two of them is marked stale (its figures are that old; it may
have stopped), and one older than the lease is left out: its chunks are
already free for another worker to claim.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from blendserve.api.chart import polyline, time_ticks, timeline
from blendserve.api.views import STALE_BEATS, BatchView, RoundView, WorkerView
from blendserve.core import deliveries
from blendserve.core.jobs import BatchStats, batch_stats
from blendserve.core.models import Batch, Chunk, PlanningRound, Request, Worker

RECENT_BATCHES = 50
RECENT_ROUNDS = 10
MIN_OBSERVED = (3, 0.05)       # results (at least 3, and 5% of the batch) before the observed rate gives the ETA


def batches(s: Session, owner: str | None, now: float, lease_s: float | None = None) -> list[BatchView]:
    q = select(Batch).order_by(Batch.created_at.desc(), Batch.id.desc()).limit(RECENT_BATCHES)
    rows = s.scalars(q if owner is None else q.where(Batch.owner == owner)).all()
    return _views(s, rows, now, lease_s)


def batch_view(s: Session, b: Batch, now: float, lease_s: float | None = None) -> BatchView:
    """One batch's progress (the JSON progress route)."""
    return _views(s, [b], now, lease_s)[0]


def _views(s: Session, rows: list[Batch], now: float, lease_s: float | None = None) -> list[BatchView]:
    stats = batch_stats(s, [b.id for b in rows])
    running = [b for b in rows if b.status == "in_progress"]
    rounds = latest_rounds(s, {b.model for b in running if b.model})
    unplanned = _unplanned(s, [b.id for b in running if b.first_run_at is None])
    firsts = first_results(s, [b.id for b in running if stats[b.id].completed + stats[b.id].failed])
    views = [_view(b, stats[b.id], rounds.get(b.model), unplanned.get(b.id, 0), now, firsts.get(b.id))
             for b in rows]
    waiting = {b.model for b, v in zip(rows, views) if v.phase in ("planning", "waiting for a worker") and b.model}
    served = _served(s, waiting, now - lease_s) if waiting and lease_s else waiting
    for b, v in zip(rows, views):
        if v.phase == "warming up" and b.model:
            v.in_engine = _in_engine(s, b.id, b.model)
        elif v.phase in ("planning", "waiting for a worker") and b.model not in served:
            v.phase, v.no_worker = "waiting for a worker", True      # nothing plans or runs it until one comes
    return views


def _served(s: Session, models: set[str], since: float) -> set[str]:
    """Those of `models` a worker heartbeating since `since` serves."""
    return set(s.scalars(select(Worker.model).where(Worker.model.in_(models), Worker.heartbeat_at > since)
                         .distinct()))


_FIRST: OrderedDict[str, float] = OrderedDict()     # batch id -> its first result's time: it never changes
_FIRST_KEPT = 4096
_FIRST_LOCK = threading.Lock()


def first_results(s: Session, batch_ids: list[str]) -> dict[str, float]:
    """When each batch's first request finished. Read once per batch and process (a scan of its finished
    rows: no index holds finished_at), then kept: a first result stays first."""
    out = {b: _FIRST[b] for b in batch_ids if b in _FIRST}
    for bid in [b for b in batch_ids if b not in out]:
        t = s.scalar(select(func.min(Request.finished_at)).where(     # an engine's results: a request failed
            Request.batch_id == bid, Request.status == "completed"))   # at intake finished before any ran
        if t is not None:
            out[bid] = float(t)
            with _FIRST_LOCK:                   # the page's reads run in the server's thread pool
                _FIRST[bid] = out[bid]
                while len(_FIRST) > _FIRST_KEPT:
                    _FIRST.popitem(last=False)
    return out


def _in_engine(s: Session, batch_id: str, model: str) -> int:
    """A warming-up batch's requests in chunks a worker holds: running, or next in its engine. Read from the
    model's claimed chunks (a few, by ix_chunks_claim) and their requests (by ix_requests_chunk)."""
    q = (select(func.count()).select_from(Chunk).join(Request, Request.chunk_id == Chunk.id)
         .where(Chunk.model == model, Chunk.status == "claimed", Request.batch_id == batch_id,
                Request.status == "planned"))
    return int(s.scalar(q) or 0)


def _unplanned(s: Session, batch_ids: list[str]) -> dict[str, int]:
    """Requests not planned yet (queued or pending), per batch; only asked of batches none of whose requests
    ran yet (one indexed count each: requests by batch and status)."""
    if not batch_ids:
        return {}
    q = (select(Request.batch_id, func.count()).where(Request.batch_id.in_(batch_ids),
                                                      Request.status.in_(("queued", "pending")))
         .group_by(Request.batch_id))
    return dict(s.execute(q).all())


def phase_of(b: Batch, done: int, unplanned: int) -> str | None:
    """What a running batch is doing, in words (see the module docstring); None when it is not running."""
    if b.status != "in_progress":
        return None
    if done:
        return "running"
    if b.first_run_at is not None:
        return "warming up"
    return "planning" if unplanned else "waiting for a worker"


def reason_of(b: Batch) -> str | None:
    """Why a batch ended without completing: its errors (as the Batch API lists them), or its status's cause."""
    if b.status == "failed":
        errs = [e for e in (b.errors or []) if isinstance(e, dict)]
        if not errs:
            return "failed (no error recorded)"
        first = errs[0]
        where = f" (line {first['line']})" if first.get("line") is not None else ""
        more = f"; and {len(errs) - 1} more" if len(errs) > 1 else ""
        return f"{first.get('code') or 'error'}{where}: {first.get('message') or ''}{more}"
    if b.status in ("cancelling", "cancelled"):
        return "cancelled by its owner; finished requests are in its output file"
    if b.status == "expired":
        return "its completion window ended; finished requests are in its output file"
    return None


def _view(b: Batch, st: BatchStats, last_round: PlanningRound | None, unplanned: int, now: float,
          first_result: float | None = None) -> BatchView:
    total, done = st.total or b.total, st.completed + st.failed
    started = b.first_run_at or b.in_progress_at
    ended = b.completed_at or b.cancelled_at or b.expired_at or b.failed_at or b.finalizing_at
    elapsed = ((ended or now) - started) if started else 0.0
    rate = (st.input_tokens + st.output_tokens) / elapsed if elapsed > 0 else 0.0
    eta, source = eta_of(b, done, total, last_round, now, first_result) if b.status == "in_progress" \
        else (None, None)
    return BatchView(b.id, b.status, b.model, done, total, rate,
                     st.cached_tokens / st.input_tokens if st.input_tokens else 0.0, eta, source,
                     phase_of(b, done, unplanned), reason_of(b), st.completed, st.failed,
                     now - b.first_run_at if b.first_run_at and b.status == "in_progress" else None)


def latest_rounds(s: Session, models: set[str]) -> dict[str, PlanningRound]:
    """The most recent planning round of each model."""
    if not models:
        return {}
    last = (select(PlanningRound.model, func.max(PlanningRound.id).label("id"))
            .where(PlanningRound.model.in_(models)).group_by(PlanningRound.model).subquery())
    return {r.model: r for r in s.scalars(select(PlanningRound).join(last, PlanningRound.id == last.c.id))}


def eta_of(b: Batch, done: int, total: int, last_round: PlanningRound | None,
           now: float, first_result: float | None = None) -> tuple[float | None, str | None]:
    """Seconds until a running batch ends, and where that came from (see the module docstring).

    first_result: when its first request finished; without it the rate counts from its first request
    reaching an engine (the warm-up included)."""
    remaining = total - done
    if remaining <= 0:
        return 0.0, "observed"
    enough = done >= max(MIN_OBSERVED[0], MIN_OBSERVED[1] * total)
    if enough and first_result is not None and now > first_result and done > 1:
        return (now - first_result) * remaining / (done - 1), "observed"
    since = b.first_run_at or b.in_progress_at
    if enough and first_result is None and since and now > since:
        return (now - since) * remaining / done, "observed"
    if last_round is not None and last_round.est_seconds is not None:
        whole = last_round.est_seconds * max(1.0, remaining / last_round.requests) if last_round.requests \
            else last_round.est_seconds         # a fragment's estimate, scaled to the batch (module docstring)
        left = last_round.started_at + last_round.duration_s + whole - now
        return (left, "estimate") if left > 0 else (None, "overdue")      # overdue: no time is better than a wrong one
    return None, None


def workers(s: Session, lease_s: float, now: float) -> list[WorkerView]:
    held: dict[str, list[int]] = {}
    for wid, cid in s.execute(select(Chunk.worker_id, Chunk.id).where(Chunk.status == "claimed")):
        held.setdefault(wid, []).append(cid)
    live = s.scalars(select(Worker).where(Worker.heartbeat_at > now - lease_s).order_by(Worker.started_at))
    beat = lease_s / 3                  # the worker's heartbeat interval (blendserve/worker/service.py)
    return [WorkerView(w.id, w.model, w.engine, w.kv_capacity_tokens, now - w.heartbeat_at, held.get(w.id, []),
                       w.running_sequences, w.kv_used_tokens, now - w.heartbeat_at > STALE_BEATS * beat)
            for w in live]


def recent_rounds(s: Session, limit: int = RECENT_ROUNDS) -> list[RoundView]:
    rows = s.scalars(select(PlanningRound).order_by(PlanningRound.id.desc()).limit(limit))
    return [RoundView(r.model, r.started_at, r.duration_s, r.requests, r.est_seconds,
                      r.est_compute_s / r.est_memory_s if r.est_compute_s is not None and r.est_memory_s else None)
            for r in rows]


def tables(s: Session, owner: str | None, lease_s: float) -> dict:
    """Batches and workers alone: what the page fetches every second (a few indexed reads per batch)."""
    now = time.time()
    return {"now": now, "batches": batches(s, owner, now, lease_s),
            "workers": workers(s, lease_s, now)}     # shared machinery, no tenant's data


def snapshot(s: Session, owner: str | None, lease_s: float) -> dict:
    """Everything on the page: the tables, and the chart and rounds (a read of the last ten minutes' results)."""
    snap = tables(s, owner, lease_s)
    now = snap["now"]
    bins = timeline(s, owner, now)
    mix = [b.prefill_tokens / (b.prefill_tokens + b.decode_tokens) if b.prefill_tokens + b.decode_tokens else None
           for b in bins]
    return {**snap,
            "rounds": recent_rounds(s),              # shared too: counts and times, no tenant's data
            "deliveries": deliveries.recent(s, owner),   # webhook events of its batches (no URL)
            "bins": bins, "peak_tokens_per_s": max(b.tokens_per_s for b in bins),
            "throughput_points": polyline([b.tokens_per_s for b in bins], 600, 120),
            "mix_points": polyline(mix, 600, 120, top=1.0),
            "planned_points": polyline([b.planned_prefill_share for b in bins], 600, 120, top=1.0),
            "x_ticks": time_ticks(bins[0].start, bins[-1].start, 600), "bin_s": bins[1].start - bins[0].start}
