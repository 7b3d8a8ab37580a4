"""Stored bytes reserved per tenant as an upload's bytes arrive, so concurrent uploads cannot pass the quota.

A quota checked once at the start of each upload lets ten uploads whose
headers all arrive before any finishes take ten times what is left. Here each
upload (a file, or one part of an Uploads API upload) holds a row in
storage_holds and grows it before it writes: in a short transaction of its own
that first takes the tenant's lock (a PostgreSQL advisory lock on the owner;
SQLite's writers are serialized already), then reads the tenant's files plus
its live holds in one statement and grants what still fits. Growth comes in
steps of RESERVE_STEP bytes, so a 200 MB upload costs ~200 short
transactions, and a step that does not fit is granted in part: the upload is
refused only once its bytes pass what the tenant has left, never before.
The upload's writer is bounded by what it was granted, so N concurrent
uploads store at most the quota between them.

A hold ends in the transaction that stores what it held (the File row, or
the part shrunk to its size), or is deleted when the upload fails. A process
that dies mid-upload leaves its hold until expires_at (HOLD_S after its last
growth), when it stops counting.
"""
from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from fastapi.concurrency import run_in_threadpool
from sqlalchemy import delete, func, literal, select, text
from sqlalchemy.orm import Session, sessionmaker

from blendserve.core.models import File
from blendserve.core.uploads import StorageHold

RESERVE_STEP = 1 << 20        # bytes a hold grows by at a time: one short transaction per MB
HOLD_S = 3600                 # a streaming hold not grown for this long belongs to a dead process


def lock_owner(session: Session, owner: str) -> None:
    """Serialize the tenant's grants (and the transactions that turn holds into files) until commit."""
    if session.get_bind().dialect.name == "postgresql":
        key = int.from_bytes(hashlib.blake2b(f"storage:{owner}".encode(), digest_size=8).digest(), "big", signed=True)
        session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})


def used(session: Session, owner: str, now: int) -> int:
    """The tenant's files plus its live holds, read in one statement (one snapshot)."""
    files = select(func.coalesce(func.sum(File.bytes), 0)).where(File.owner == owner).scalar_subquery()
    holds = select(func.coalesce(func.sum(StorageHold.bytes), 0)).where(
        StorageHold.owner == owner, StorageHold.expires_at > now).scalar_subquery()
    return int(session.scalar(select(literal(0) + files + holds)) or 0)


def grant(sessions: sessionmaker[Session], owner: str, hold_id: str, n: int, quota: int, expires_at: int) -> int:
    """Grow the hold by up to n bytes, as much as the quota leaves; returns the bytes granted (0: none left)."""
    now = int(time.time())
    with sessions.begin() as s:
        lock_owner(s, owner)
        got = max(0, min(n, quota - used(s, owner, now)))
        row = s.get(StorageHold, hold_id)
        if row is None:
            s.add(StorageHold(id=hold_id, owner=owner, bytes=got, expires_at=expires_at))
        else:
            row.bytes, row.expires_at = row.bytes + got, expires_at
    return got


def release(sessions: sessionmaker[Session], *hold_ids: str) -> None:
    with sessions.begin() as s:
        s.execute(delete(StorageHold).where(StorageHold.id.in_(hold_ids)))


def sweep(session: Session, now: int) -> int:
    """Delete expired holds (they count for nothing already); returns how many."""
    return session.execute(delete(StorageHold).where(StorageHold.expires_at <= now)).rowcount or 0


@dataclass
class Reserver:
    """One upload's hold: `ensure(n)` before n bytes in all may be written; `granted` bounds the writer.
    With no quota it grants everything and touches no row."""

    sessions: sessionmaker[Session]
    owner: str
    hold_id: str
    quota: int                                   # 0: no stored-bytes quota
    expires_at: Callable[[], int] = field(default=lambda: int(time.time()) + HOLD_S)
    granted: int = 0

    @property
    def active(self) -> bool:
        return self.quota > 0

    async def ensure(self, total: int) -> int:
        """Make the hold cover `total` bytes if the quota allows, in RESERVE_STEP steps; returns `granted`."""
        if not self.active:
            return total
        if total > self.granted:
            want = max(total - self.granted, RESERVE_STEP)
            self.granted += await run_in_threadpool(grant, self.sessions, self.owner, self.hold_id, want,
                                                    self.quota, self.expires_at())
        return self.granted

    async def release(self) -> None:
        if self.active:
            await run_in_threadpool(release, self.sessions, self.hold_id)


@asynccontextmanager
async def held(reserver: Reserver) -> AsyncIterator[Reserver]:
    """The hold is deleted if the block fails (a refusal, a client gone, a cancelled task): called inline, not
    in the threadpool, so that it runs even in a task being cancelled."""
    try:
        yield reserver
    except BaseException:
        if reserver.active:
            release(reserver.sessions, reserver.hold_id)
        raise
