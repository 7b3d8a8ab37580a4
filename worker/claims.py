"""Chunk claims: who runs what, under a lease that the worker keeps renewing.

A claim is a row update; on PostgreSQL the candidate row is locked with
FOR UPDATE SKIP LOCKED so concurrent workers never take the same chunk, and on
SQLite every transaction holds the write lock (core.db), which serialises
claims. A chunk whose lease ran out (its worker died) is claimable again.

A chunk is `done` only when none of its requests is left to run: a worker
that stops (or skips requests) hands the chunk back as `pending`, so the
rest runs later, on any worker, and no request is stranded in a done chunk.
A chunk whose claims were lost LOST_CLAIMS times (its workers died while
running it) may hold a request that kills its worker: its requests are then
marked as suspects, and suspects run one at a time, each try counted
(worker/service.py), so only the culprit fails.
"""
from __future__ import annotations

import time

from sqlalchemy import and_, case, exists, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from core.models import Batch, Chunk, Request, Worker

LOST_CLAIMS = 2


def my_rank(session: Session, worker_id: str, model: str, lease_s: float, now: float) -> int | None:
    """This worker's data-parallel rank: its place among the model's live workers, oldest first
    (the same rule the planner uses to cut the plan into per-rank pieces)."""
    live = session.scalars(select(Worker.id).where(Worker.model == model, Worker.heartbeat_at >= now - lease_s)
                           .order_by(Worker.started_at, Worker.id)).all()
    return live.index(worker_id) if worker_id in live else None


def claim(sessions: sessionmaker[Session], worker_id: str, model: str, lease_s: float) -> int | None:
    """The next chunk in plan order: chunks for any rank or for this worker's rank first, then
    (work stealing) the others' chunks, so no worker idles while work is left."""
    now = time.time()
    with sessions.begin() as s:
        rank = my_rank(s, worker_id, model, lease_s, now)
        mine = case((or_(Chunk.rank.is_(None), Chunk.rank == rank), 0), else_=1)
        chunk = s.scalars(
            select(Chunk).where(Chunk.model == model,
                                or_(Chunk.status == "pending",
                                    and_(Chunk.status == "claimed", Chunk.lease_until < now)))
            .order_by(mine, Chunk.seq).limit(1).with_for_update(skip_locked=True)).first()
        if chunk is None:
            return None
        if chunk.status == "claimed" and chunk.attempts >= LOST_CLAIMS:
            s.execute(update(Request).where(Request.chunk_id == chunk.id, Request.status == "planned",
                                            Request.attempts == 0).values(attempts=1))
        chunk.status, chunk.worker_id, chunk.lease_until = "claimed", worker_id, now + lease_s
        chunk.attempts += 1
        batch_ids = select(Request.batch_id).where(Request.chunk_id == chunk.id).distinct()
        s.execute(update(Batch).where(Batch.id.in_(batch_ids), Batch.first_run_at.is_(None))
                  .values(first_run_at=now))
        return chunk.id


def renew(sessions: sessionmaker[Session], chunk_id: int, worker_id: str, lease_s: float) -> bool:
    """False when the lease was lost (it ran out and another worker took the chunk)."""
    with sessions.begin() as s:
        res = s.execute(update(Chunk).where(Chunk.id == chunk_id, Chunk.worker_id == worker_id,
                                            Chunk.status == "claimed")
                        .values(lease_until=time.time() + lease_s))
        return res.rowcount == 1


def release(sessions: sessionmaker[Session], chunk_id: int, worker_id: str, *, undo_claim: bool = False) -> str:
    """Give the chunk up: `done` if nothing in it is left to run, else back to `pending`.

    undo_claim: the claim does not count as a try (a clean stop, or a stream
    failure already blamed on the requests it was running). Returns the
    chunk's new status ('' if this worker no longer held it).
    """
    left = exists().where(Request.chunk_id == chunk_id, Request.status == "planned", Request.batch_id == Batch.id,
                          Batch.status == "in_progress")
    with sessions.begin() as s:
        status = "pending" if s.scalar(select(left)) else "done"
        values = {"status": status, "lease_until": None, "worker_id": None if status == "pending" else worker_id}
        if undo_claim:
            values["attempts"] = case((Chunk.attempts > 0, Chunk.attempts - 1), else_=0)
        res = s.execute(update(Chunk).where(Chunk.id == chunk_id, Chunk.worker_id == worker_id,
                                            Chunk.status == "claimed").values(**values))
        return status if res.rowcount == 1 else ""
