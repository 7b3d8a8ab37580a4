"""Fencing: a scheduler that lost its lease cannot write.

Every write transaction of the scheduler begins by extending its own lease,
with the lease's holder and expiry in the WHERE clause. If another scheduler
took the lease meanwhile (this one stalled past it), the update matches no row
and the transaction is abandoned with LostLease before anything is written.
On PostgreSQL the update also locks the lease row until commit, so a standby's
takeover waits for the transaction in flight and then finds the lease renewed;
on SQLite every write transaction holds the database's write lock anyway.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, update
from sqlalchemy.orm import Session, sessionmaker

from blendserve.core.models import Lease

LEASE = "scheduler"


class LostLease(Exception):
    """Another scheduler holds the lease now: stop acting, stand by."""


class FencedSessions(sessionmaker):
    """A sessionmaker whose begin() proves, inside the transaction, that the lease is still ours."""

    def __init__(self, engine: Engine, holder: str, lease_s: float) -> None:
        super().__init__(engine, expire_on_commit=False)
        self.holder, self.lease_s = holder, lease_s

    @contextmanager
    def begin(self) -> Iterator[Session]:       # type: ignore[override]
        with super().begin() as s:
            now = time.time()
            held = s.execute(update(Lease).where(Lease.name == LEASE, Lease.holder == self.holder,
                                                 Lease.until >= now)
                             .values(until=now + self.lease_s)).rowcount == 1
            if not held:
                raise LostLease(f"scheduler {self.holder} no longer holds the lease")
            yield s
