"""Queries over the job table that more than one role needs."""
from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from blendserve.core import counts

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
    """request_counts and usage of each batch, live, from its counter rows (blendserve/core/counts.py).

    total stays 0: callers show the batch's own total (set when it turns in_progress).
    """
    if not batch_ids:
        return {}
    out = {bid: BatchStats() for bid in batch_ids}
    for bid, *vals in session.execute(counts.totals(batch_ids)).all():
        out[bid] = BatchStats(0, *(int(v or 0) for v in vals))
    return out
