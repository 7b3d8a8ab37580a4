"""Numbering finished requests, so a running batch's results can be read in order and resumed exactly once.

Workers commit results concurrently, and a transaction that stamped an
earlier finished_at can commit after a later one: a reader that paged by
finished_at would skip the late row. Instead the leading scheduler (one per
database, every write fenced by its lease) gives each finished row of a
batch the next out_seq, in one UPDATE per batch per tick, to the rows
visible at that moment. A row that commits late is simply numbered on a later
tick, above every number already given, so numbers only ever grow in the
order a reader can see them: a reader that asks for out_seq > its cursor
never misses or repeats a line (GET /v1/batches/{id}/output,
blendserve/api/routes/outputs.py).

The rows waiting for a number sit in a partial index (ix_requests_unnumbered,
migration 0014), so finding them costs what was finished since the last tick,
not the batch's size. Rows of a batch still validating are left alone: a
restarted validation deletes and writes them again.
"""
from __future__ import annotations

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from blendserve.core.models import Batch, Request

# Rows numbered per batch per tick at most: a backlog (rows finished before migration 0014, or a pause)
# drains over ticks, each a short write transaction beside the workers'.
PAGE = 20_000


def unnumbered(batch_id: str | None = None):
    """The finished rows without a number (of one batch): exactly ix_requests_unnumbered's predicate, so
    both databases answer from that index."""
    q = (Request.out_seq.is_(None), Request.finished_at.is_not(None))
    return q if batch_id is None else (Request.batch_id == batch_id, *q)


def number_finished(sessions: sessionmaker[Session], page: int = PAGE) -> int:
    """Number every batch's newly visible finished rows; returns how many rows got a number."""
    with sessions() as s:
        waiting = select(Request.batch_id).where(*unnumbered()).distinct().subquery()
        batch_ids = s.scalars(select(Batch.id).where(Batch.id.in_(select(waiting.c.batch_id)),
                                                     Batch.status != "validating")).all()
    return sum(number_batch(sessions, bid, page) for bid in batch_ids)


def number_batch(sessions: sessionmaker[Session], batch_id: str, page: int = PAGE) -> int:
    """One UPDATE: the batch's next `page` unnumbered rows, by (finished_at, id), get max(out_seq)+1, +2, ...

    The rows and the base are read in the statement's own transaction, which the scheduler's lease fences:
    no other writer gives numbers, so the base is the batch's true maximum.
    """
    order = (Request.finished_at, Request.id)
    backlog = (select(Request.id, func.row_number().over(order_by=order).label("rn"))
               .where(*unnumbered(batch_id)).order_by(*order).limit(page).subquery())
    with sessions.begin() as s:
        base = s.scalar(select(func.coalesce(func.max(Request.out_seq), 0))     # from ix_requests_batch_out
                        .where(Request.batch_id == batch_id, Request.out_seq.is_not(None)))
        return s.execute(update(Request).where(Request.id == backlog.c.id)
                         .values(out_seq=base + backlog.c.rn)
                         .execution_options(synchronize_session=False)).rowcount
