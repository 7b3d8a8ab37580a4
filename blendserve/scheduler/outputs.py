"""Numbering finished requests, so a running batch's results can be read in order and resumed exactly once.

Workers commit results concurrently, and a transaction that stamped an
earlier finished_at can commit after a later one: a reader that paged by
finished_at would skip the late row. Instead the leading scheduler (one per
database, every write fenced by its lease) gives each finished row of a
batch the next out_seq, in one UPDATE per tick for every batch, to the rows
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
from sqlalchemy.orm import Session, aliased, sessionmaker

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
    """Number every batch's newly visible finished rows; returns how many rows got a number.

    One read of the partial index when nothing waits (most ticks between worker commits), else one fenced
    UPDATE for every batch together: a transaction per batch (its lease renewal, its max, its update) made
    a tick's cost grow with the number of running batches.
    """
    with sessions() as s:
        if s.scalar(select(Request.id).join(Batch, Batch.id == Request.batch_id)
                    .where(*unnumbered(), Batch.status != "validating").limit(1)) is None:
            return 0
    with sessions.begin() as s:
        return s.execute(_numbering(page)).rowcount


def number_batch(sessions: sessionmaker[Session], batch_id: str, page: int = PAGE) -> int:
    """number_finished for one batch."""
    with sessions.begin() as s:
        return s.execute(_numbering(page, batch_id)).rowcount


def _numbering(page: int, batch_id: str | None = None):
    """One UPDATE: each batch's next `page` unnumbered rows, by (finished_at, id), get its max(out_seq)+1, +2, ...

    The rows and the bases are read in the statement's own snapshot, inside the scheduler's fenced
    transaction: no other writer gives numbers, so each base is its batch's true maximum.
    """
    order = (Request.finished_at, Request.id)
    todo = (select(Request.id, Request.batch_id,
                   func.row_number().over(partition_by=Request.batch_id, order_by=order).label("rn"))
            .join(Batch, Batch.id == Request.batch_id)
            .where(*unnumbered(batch_id), Batch.status != "validating").subquery("todo"))
    # Subqueries, not CTEs: Python's sqlite3 reports no rowcount for a statement that starts with WITH.
    waiting, numbered = aliased(Request), aliased(Request)
    top = (select(func.coalesce(func.max(numbered.out_seq), 0))       # from ix_requests_batch_out
           .where(numbered.batch_id == waiting.batch_id, numbered.out_seq.is_not(None)).scalar_subquery())
    mine = () if batch_id is None else (waiting.batch_id == batch_id,)
    bases = (select(waiting.batch_id.label("batch_id"), top.label("base"))      # from ix_requests_unnumbered
             .where(*mine, waiting.out_seq.is_(None), waiting.finished_at.is_not(None))
             .group_by(waiting.batch_id).subquery("bases"))
    return (update(Request).where(Request.id == todo.c.id, todo.c.rn <= page, bases.c.batch_id == todo.c.batch_id)
            .values(out_seq=bases.c.base + todo.c.rn).execution_options(synchronize_session=False))
