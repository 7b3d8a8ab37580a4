"""The status poll (GET /v1/batches/{id}) on prebuilt Core statements: the hottest route of a batch API.

Clients poll every second or faster, hundreds at a time. Building an ORM
query per poll costs several times the database work itself (SQLAlchemy's
statement construction and coercion), so the two statements are built once
with bound parameters and run on the session's connection.
"""
from __future__ import annotations

from types import SimpleNamespace

from sqlalchemy import bindparam, case, func, select
from sqlalchemy.orm import Session

from core.jobs import BatchStats
from core.models import Batch, Request
from server.errors import not_found
from server.serialize import batch_obj

_batches = Batch.__table__
_BATCH = select(_batches).where(_batches.c.id == bindparam("id"))
_done = Request.status == "completed"
_STATS = select(
    func.count(),
    func.sum(case((_done, 1), else_=0)),
    func.sum(case((Request.status.in_(("failed", "cancelled", "expired")), 1), else_=0)),
    func.sum(case((_done, Request.prompt_tokens), else_=0)),
    func.sum(case((_done, Request.cached_tokens), else_=0)),
    func.sum(case((_done, Request.completion_tokens), else_=0)),
).where(Request.batch_id == bindparam("id"))


def batch_status(session: Session, owner: str, batch_id: str) -> dict:
    """The batch object, as batch_obj renders it, in two indexed reads."""
    conn = session.connection()
    row = conn.execute(_BATCH, {"id": batch_id}).mappings().first()
    if row is None or row["owner"] != owner:
        raise not_found("batch", batch_id)
    stats = BatchStats(*(int(v or 0) for v in conn.execute(_STATS, {"id": batch_id}).one()))
    b = SimpleNamespace(**row, metadata_=row["metadata"])
    return batch_obj(b, stats)  # type: ignore[arg-type]
