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
drops the entry at once.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
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
        self._items: OrderedDict[tuple[str, str], tuple[float, bytes]] = OrderedDict()
        self._lock = threading.Lock()       # cancel (a sync route) drops entries from the threadpool

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
        with self._lock:
            self._items.pop((owner, batch_id), None)
