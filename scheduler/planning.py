"""Planning rounds: order the unclaimed work of each model and cut it into chunks.

A round starts when unplanned requests reach N_max or the oldest has waited
T_max (DESIGN.md section 2). It re-plans everything no worker has claimed:
the pending chunks are dissolved, their requests join the new ones, and the
policy orders the union. Claimed chunks are never touched.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Protocol, Sequence

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.orm import Session, sessionmaker

from core.config import Settings
from core.models import Batch, Chunk, Request

log = logging.getLogger("blendserve.scheduler")


@dataclass(frozen=True)
class PlanItem:
    id: int
    batch_created_at: int
    batch_id: str
    line: int
    prompt_tokens: int
    max_tokens: int


class Policy(Protocol):
    def order(self, items: Sequence[PlanItem]) -> list[int]:
        """Indices into items, in admission order."""
        ...


class FCFS:
    """File order, batch after batch: what vLLM's run_batch does; the baseline."""

    def order(self, items: Sequence[PlanItem]) -> list[int]:
        return sorted(range(len(items)), key=lambda i: (items[i].batch_created_at, items[i].batch_id, items[i].line))


def due(session: Session, settings: Settings, now: float) -> bool:
    """The dynamic-batching rule: enough unplanned work, or the oldest has waited long enough."""
    count, oldest = session.execute(
        select(func.count(), func.min(Batch.in_progress_at)).select_from(Request).join(Batch)
        .where(Request.status == "pending", Batch.status == "in_progress")).one()
    return count > 0 and (count >= settings.plan_max_requests or now - oldest >= settings.plan_max_wait_s)


def plan_round(sessions: sessionmaker[Session], settings: Settings, policy: Policy) -> int:
    """Run a round if one is due; returns how many requests were (re)planned."""
    now = time.time()
    with sessions.begin() as s:
        if not due(s, settings, now):
            return 0
        unclaimed = s.scalars(select(Chunk.id).where(Chunk.status == "pending")
                              .with_for_update(skip_locked=True)).all()
        rows = s.execute(
            select(Request.id, Request.model, Batch.created_at, Batch.id, Request.line, Request.prompt_tokens,
                   Request.max_tokens).join(Batch)
            .where(Batch.status == "in_progress",
                   (Request.status == "pending")
                   | ((Request.status == "planned") & Request.chunk_id.in_(unclaimed)))).all()
        if unclaimed:
            s.execute(delete(Chunk).where(Chunk.id.in_(unclaimed)))
        by_model: dict[str, list[PlanItem]] = {}
        for rid, model, created, bid, line, ptok, mtok in rows:
            by_model.setdefault(model, []).append(PlanItem(rid, created, bid, line, ptok, mtok))
        seq = (s.scalar(select(func.max(Chunk.seq))) or 0) + 1
        for model, items in by_model.items():
            order = policy.order(items)
            updates = []
            for start in range(0, len(order), settings.chunk_requests):
                part = order[start:start + settings.chunk_requests]
                cid = s.execute(insert(Chunk).values(model=model, seq=seq, status="pending", size=len(part),
                                                     attempts=0, created_at=now).returning(Chunk.id)).scalar_one()
                seq += 1
                updates += [{"id": items[i].id, "chunk_id": cid, "position": pos, "status": "planned"}
                            for pos, i in enumerate(part)]
            s.execute(update(Request), updates)
        log.info("planned %d request(s) in %d model(s), %.2fs", len(rows), len(by_model), time.time() - now)
        return len(rows)
