"""The status poll (GET /v1/batches/{id}) on prebuilt Core statements: the hottest route of a batch API.

Counts and usage come from the batch's counter rows (blendserve/core/counts.py), a few
rows whatever the batch's size; request_counts.total is the batch's total.

Clients poll every second or faster, hundreds at a time. Building an ORM
query per poll costs several times the database work itself (SQLAlchemy's
statement construction and coercion), so the two statements are built once
with bound parameters and run on the session's connection.

StatusCache answers repeated polls of one batch from memory for a fraction
of a second (BLENDSERVE_STATUS_CACHE_S, default 0.25; 0 turns it off): 200
polls/s of a batch cost ~4 database reads/s instead of 200, and a reply is
never older than that. A process only replaces an entry with a newer read,
so one API process never shows a batch going back in time; its own cancel
drops the entry at once (and a read begun before the drop is not stored).

Polls of a batch that miss together share one read (`read_through`): with
32 connections polling, an expired entry otherwise drew a read from each poll
until the first came back, ~30 reads/s instead of 4, most of the API's CPU.
A poll that joins a read begun a moment before it arrived gets an answer
well within the cache's bound.
"""
from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from types import SimpleNamespace

from sqlalchemy import bindparam, func, select
from sqlalchemy.orm import Session

from blendserve.api.errors import check_id, not_found
from blendserve.api.serialize import batch_obj
from blendserve.core.counts import FIELDS
from blendserve.core.jobs import BatchStats
from blendserve.core.models import Batch, BatchCount

_batches = Batch.__table__
_BATCH = select(_batches).where(_batches.c.id == bindparam("id"))
_STATS = select(*(func.sum(getattr(BatchCount, f)) for f in FIELDS)).where(BatchCount.batch_id == bindparam("id"))


def batch_status(session: Session, owner: str, batch_id: str) -> dict:
    """The batch object, as batch_obj renders it, in two indexed reads."""
    conn = session.connection()
    row = conn.execute(_BATCH, {"id": check_id("batch", batch_id)}).mappings().first()
    if row is None or row["owner"] != owner:
        raise not_found("batch", batch_id)
    stats = BatchStats(0, *(int(v or 0) for v in conn.execute(_STATS, {"id": batch_id}).one()))
    b = SimpleNamespace(**row, metadata_=row["metadata"])
    return batch_obj(b, stats)  # type: ignore[arg-type]


class StatusCache:
    """Serialized batch objects by (owner, batch id), for `ttl` seconds; at most `size` entries (LRU)."""

    def __init__(self, ttl: float, size: int = 10_000) -> None:
        self.ttl, self.size = ttl, size
        self._items: OrderedDict[tuple[str, str], tuple[float, bytes | None]] = OrderedDict()   # None: dropped
        self._lock = threading.Lock()       # cancel (a sync route) drops entries from the threadpool
        self._flights: dict[tuple[str, str], asyncio.Task[bytes]] = {}

    async def read_through(self, owner: str, batch_id: str, read: Callable[[], Awaitable[bytes]]) -> bytes:
        """The cached body, else the body of the read in flight for this batch, else a new read's (stored)."""
        body = self.get(owner, batch_id)
        if body is not None:
            return body
        if self.ttl <= 0:
            return await read()
        key = (owner, batch_id)
        task = self._flights.get(key)
        if task is None or task.get_loop() is not asyncio.get_running_loop():
            task = asyncio.ensure_future(self._fill(key, read))
            self._flights[key] = task
            task.add_done_callback(lambda t: self._landed(key, t))
        return await asyncio.shield(task)      # a poller that goes away leaves the read to the others

    async def _fill(self, key: tuple[str, str], read: Callable[[], Awaitable[bytes]]) -> bytes:
        read_at = time.monotonic()
        body = await read()
        self.put(*key, body, read_at)
        return body

    def _landed(self, key: tuple[str, str], task: asyncio.Task[bytes]) -> None:
        if self._flights.get(key) is task:
            del self._flights[key]
        if not task.cancelled():
            task.exception()                   # retrieved, even if every waiter went away

    def get(self, owner: str, batch_id: str) -> bytes | None:
        hit = self._items.get((owner, batch_id))
        if hit is None or time.monotonic() - hit[0] > self.ttl:
            return None
        return hit[1]

    def put(self, owner: str, batch_id: str, body: bytes, read_at: float) -> None:
        if self.ttl <= 0:
            return
        key = (owner, batch_id)
        with self._lock:
            old = self._items.get(key)
            if old is None or old[0] < read_at:
                self._items[key] = (read_at, body)
                self._items.move_to_end(key)
                while len(self._items) > self.size:
                    self._items.popitem(last=False)

    def drop(self, owner: str, batch_id: str) -> None:
        """Forget the batch's body; a read begun before now is neither stored nor joined."""
        key = (owner, batch_id)
        with self._lock:
            self._flights.pop(key, None)
            if self.ttl > 0:
                self._items[key] = (time.monotonic(), None)
                self._items.move_to_end(key)
