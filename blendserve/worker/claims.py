"""Chunk claims: who runs what, under a lease that the worker keeps renewing.

A claim is a row update; on PostgreSQL the candidate row is locked with
FOR UPDATE SKIP LOCKED so concurrent workers never take the same chunk, and on
SQLite every transaction holds the write lock (blendserve.core.db), which serialises
claims. A chunk whose lease ran out (its worker died) is claimable again.

A chunk is `done` only when none of its requests is left to run: a worker
that stops (or skips requests) hands the chunk back as `pending`, so the
rest runs later, on any worker, and no request is stranded in a done chunk.
A chunk whose claims were lost LOST_CLAIMS times (its workers died while
running it) may hold a request that kills its worker: its requests are then
marked as suspects, and suspects run one at a time, each try counted
(blendserve/worker/service.py), so only the culprit fails.
"""
from __future__ import annotations

import threading
import time
from typing import NamedTuple

from sqlalchemy import Row, and_, bindparam, case, exists, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from blendserve.core.models import Batch, Chunk, Request, Worker

LOST_CLAIMS = 2
RANKS_FOR = 1 / 6           # how long a process keeps the live-worker list, in leases


class _Ranks:
    """The model's live workers in rank order, read at most every RANKS_FOR of a lease per process.

    Reading the whole worker table (64 rows at 64 ranks) at every claim to find
    its own rank costs a quarter of an echo process's CPU. The set of
    live workers changes on the scale of a lease, and a stale rank only changes
    which chunks a worker prefers (it steals the others' anyway), so a short
    cache is exact enough. A worker missing from the cached list re-reads it.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cached: dict[str, tuple[float, list[str]]] = {}

    def rank(self, session: Session, worker_id: str, model: str, lease_s: float, now: float) -> int | None:
        with self.lock:
            at, live = self.cached.get(model, (float("-inf"), []))
        if now - at > lease_s * RANKS_FOR or worker_id not in live:
            live = list(session.scalars(select(Worker.id).where(Worker.model == model,
                                                                Worker.heartbeat_at >= now - lease_s)
                                        .order_by(Worker.started_at, Worker.id)))
            with self.lock:
                self.cached[model] = (now, live)
        return live.index(worker_id) if worker_id in live else None


_RANKS = _Ranks()
_STARTED: set[tuple[int, str]] = set()     # (engine, batch) this process has already marked as started


class Claimed(NamedTuple):
    """A claimed chunk and its requests still to run, in plan order."""
    id: int
    rows: list[Row]


_CANDIDATE = (select(Chunk.id, Chunk.status, Chunk.attempts)
              .where(Chunk.model == bindparam("model"),
                     or_(Chunk.status == "pending",
                         and_(Chunk.status == "claimed", Chunk.lease_until < bindparam("now"))))
              .limit(1).with_for_update(skip_locked=True))
_TAKE = (update(Chunk).where(Chunk.id == bindparam("cid"))
         .values(status="claimed", worker_id=bindparam("wid"), lease_until=bindparam("until"),
                 attempts=Chunk.attempts + 1))
_ROWS = (select(Request.id, Request.batch_id, Request.body, Request.prompt_ids, Request.max_tokens,
                Request.attempts, Batch.endpoint).join(Batch)
         .where(Request.chunk_id == bindparam("cid"), Request.status == "planned").order_by(Request.position))


def claim(sessions: sessionmaker[Session], worker_id: str, model: str, lease_s: float) -> Claimed | None:
    """The next chunk in plan order, with its requests: chunks for any rank or for this worker's rank
    first, then (work stealing) the others' chunks, so no worker idles while work is left.

    One transaction: pick and lock the chunk, take it, read its rows, and mark
    its batches started (only batches this process has not marked before).
    """
    now = time.time()
    with sessions.begin() as s:
        rank = _RANKS.rank(s, worker_id, model, lease_s, now)
        mine = case((or_(Chunk.rank.is_(None), Chunk.rank == rank), 0), else_=1)
        chunk = s.execute(_CANDIDATE.order_by(mine, Chunk.seq), {"model": model, "now": now}).first()
        if chunk is None:
            return None
        if chunk.status == "claimed" and chunk.attempts >= LOST_CLAIMS:
            s.execute(update(Request).where(Request.chunk_id == chunk.id, Request.status == "planned",
                                            Request.attempts == 0).values(attempts=1))
        s.execute(_TAKE, {"cid": chunk.id, "wid": worker_id, "until": now + lease_s})
        rows = list(s.execute(_ROWS, {"cid": chunk.id}))
        db = id(s.get_bind())
        fresh = {(db, r.batch_id) for r in rows} - _STARTED
        if fresh:
            s.execute(update(Batch).where(Batch.id.in_([b for _, b in fresh]), Batch.first_run_at.is_(None))
                      .values(first_run_at=now))
    _STARTED.update(fresh)
    return Claimed(chunk.id, rows)


def renew(sessions: sessionmaker[Session], chunk_ids: list[int], worker_id: str, lease_s: float) -> set[int]:
    """Renew the leases of a rank's chunks in one statement; the ids still held (a missing one was lost: its
    lease ran out and another worker took it)."""
    if not chunk_ids:
        return set()
    with sessions.begin() as s:
        return set(s.scalars(update(Chunk).where(Chunk.id.in_(chunk_ids), Chunk.worker_id == worker_id,
                                                 Chunk.status == "claimed")
                             .values(lease_until=time.time() + lease_s).returning(Chunk.id)))


def release(sessions: sessionmaker[Session], chunk_id: int, worker_id: str, *, undo_claim: bool = False) -> str:
    """Give the chunk up: `done` if nothing in it is left to run, else back to `pending`.

    undo_claim: the claim does not count as a try (a clean stop, or a stream
    failure already blamed on the requests it was running). Returns the
    chunk's new status ('' if this worker no longer held it). One statement: which
    status is decided in it, from the chunk's rows still `planned`.
    """
    left = exists().where(Request.chunk_id == chunk_id, Request.status == "planned", Request.batch_id == Batch.id,
                          Batch.status == "in_progress")
    values = {"status": case((left, "pending"), else_="done"), "lease_until": None,
              "worker_id": case((left, None), else_=worker_id)}
    if undo_claim:
        values["attempts"] = case((Chunk.attempts > 0, Chunk.attempts - 1), else_=0)
    with sessions.begin() as s:
        status = s.scalar(update(Chunk).where(Chunk.id == chunk_id, Chunk.worker_id == worker_id,
                                              Chunk.status == "claimed").values(**values).returning(Chunk.status))
        return status or ""
