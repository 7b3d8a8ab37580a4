"""The dashboard's chart: tokens/s over the last minutes, and the plan against what ran.

The plan against what ran: per time bin, the share of prefill among the
tokens the plan in effect expected to compute (prefill = prompt tokens not
served by the prefix cache, decode = completion tokens), beside the same
share of what the results written in that bin computed. Token shares are a
proxy for the compute/memory balance (prefill is compute-dense, decode
memory-dense), the same one for both lines; the page says so.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from blendserve.core.models import Batch, PlanningRound, Request

BINS = 30                      # points of the throughput plot


@dataclass
class Bin:
    start: float
    tokens_per_s: float
    prefill_tokens: int        # prompt tokens computed (not cached): compute-dense work
    decode_tokens: int         # completion tokens: memory-dense work
    planned_prefill_share: float | None = None   # the plan in effect at the bin's end; None: no round yet


def planned_shares(s: Session, bins: list[Bin], width: float) -> None:
    """Set each bin's planned prefill share: the latest round of every model started before the bin's end."""
    if not bins:
        return
    start = bins[0].start
    first = (select(PlanningRound.model, func.max(PlanningRound.id).label("id"))
             .where(PlanningRound.started_at <= start).group_by(PlanningRound.model).subquery())
    before = s.scalars(select(PlanningRound).join(first, PlanningRound.id == first.c.id)).all()
    during = s.scalars(select(PlanningRound).where(PlanningRound.started_at > start)
                       .order_by(PlanningRound.started_at)).all()
    current = {r.model: r for r in before}
    i = 0
    for b in bins:
        while i < len(during) and during[i].started_at <= b.start + width:
            current[during[i].model] = during[i]
            i += 1
        known = [r for r in current.values() if r.est_prefill_tokens is not None]
        prefill = sum(r.est_prefill_tokens for r in known)
        tokens = prefill + sum(r.est_decode_tokens for r in known)
        b.planned_prefill_share = prefill / tokens if tokens > 0 else None


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
    planned_shares(s, bins, width)
    return bins


def polyline(values: list[float | None], width: int, height: int, top: float | None = None) -> str:
    """SVG points for values scaled into a width x height box (0 at the bottom, `top` or the peak at the top);
    None values are left out."""
    top = top or max((v for v in values if v is not None), default=0.0) or 1.0
    step = width / max(len(values) - 1, 1)
    return " ".join(f"{i * step:.1f},{height - v / top * height:.1f}" for i, v in enumerate(values) if v is not None)


def time_ticks(start: float, end: float, width: int, n: int = 5) -> list[tuple[float, str]]:
    """(x, HH:MM:SS) labels of the chart's time axis: n evenly spaced from start to end, in local time."""
    return [(i * width / (n - 1), time.strftime("%H:%M:%S", time.localtime(start + i * (end - start) / (n - 1))))
            for i in range(n)]
