"""Queries over the job table that more than one role needs."""
from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from core.models import Request

UNFINISHED = ("queued", "pending", "planned")


@dataclass
class BatchStats:
    total: int = 0
    completed: int = 0
    failed: int = 0
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0


def batch_stats(session: Session, batch_ids: list[str]) -> dict[str, BatchStats]:
    """request_counts and usage of each batch, live, in one grouped query."""
    if not batch_ids:
        return {}
    done = Request.status == "completed"
    rows = session.execute(
        select(
            Request.batch_id,
            func.count(),
            func.sum(case((done, 1), else_=0)),
            func.sum(case((Request.status.in_(("failed", "cancelled", "expired")), 1), else_=0)),
            func.sum(case((done, Request.prompt_tokens), else_=0)),
            func.sum(case((done, Request.cached_tokens), else_=0)),
            func.sum(case((done, Request.completion_tokens), else_=0)),
        )
        .where(Request.batch_id.in_(batch_ids))
        .group_by(Request.batch_id)
    ).all()
    out = {bid: BatchStats() for bid in batch_ids}
    for bid, *vals in rows:
        out[bid] = BatchStats(*(int(v or 0) for v in vals))
    return out
