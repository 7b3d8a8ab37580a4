"""Time- and state-driven batch transitions: cancel, expire, finalize.

Each transition first settles the request rows (a short transaction), then
writes the output and error files, then flips the batch status with the file
ids in one transaction. A crash anywhere in between leaves the batch in a
state this module picks up again on the next tick, so nothing is lost and no
batch ends without its files.

Every status change is conditional (UPDATE ... WHERE status = the state it
leaves): a transition that lost a race (a cancel landing as the batch
completes) changes nothing, and the files it wrote are deleted, never
orphaned. A batch whose transition raises (a full disk) is retried alone,
with backoff, while every other batch goes on.
"""
from __future__ import annotations

import logging
import time

from sqlalchemy import Text, and_, case, cast, false, func, select, update
from sqlalchemy.orm import Session, sessionmaker

from blendserve.core import counts, deliveries
from blendserve.core.ids import new_id
from blendserve.core.jobs import UNFINISHED
from blendserve.core.models import Batch, File, Request
from blendserve.core.storage import FileStore
from blendserve.core.webhook_settings import WebhookSettings
from blendserve.protocol import batch_lines
from blendserve.scheduler.backoff import Backoff
from blendserve.scheduler.fencing import LostLease

log = logging.getLogger("blendserve.scheduler")

PAGE = 5000
RENEW_EVERY_S = 5.0
_MESSAGES = {"batch_expired": "This request could not be executed before the completion window expired.",
             "batch_cancelled": "This request was not executed because the batch was cancelled."}


class _Moved(Exception):
    """The batch left the state a transition started from; the transition is abandoned."""


def settle(sessions: sessionmaker[Session], store: FileStore, backoff: Backoff | None = None,
           hooks: WebhookSettings | None = None) -> int:
    """One pass over every batch that needs a transition; each batch alone. Returns how many moved. A batch
    that ends queues its webhook event (`hooks`) in the transaction that ends it."""
    backoff = backoff or Backoff()
    moved = 0
    for bid, step in _due(sessions):
        key = ("settle", bid)
        if not backoff.ready(key):
            continue
        try:
            step(sessions, store, bid, hooks)
            backoff.succeeded(key)
            moved += 1
        except LostLease:
            raise
        except Exception:
            log.exception("batch %s: transition failed; retrying it alone", bid)
            backoff.failed(key)     # a transition is retried for good: the results are safe in the database
    return moved


def _cancel(sessions: sessionmaker[Session], store: FileStore, bid: str, hooks: WebhookSettings | None) -> None:
    _close_unfinished(sessions, bid, "cancelled", "batch_cancelled", ("cancelling",))
    _finish(sessions, store, bid, "cancelled", "cancelled_at", "cancelling", hooks)


def _expire(sessions: sessionmaker[Session], store: FileStore, bid: str, hooks: WebhookSettings | None) -> None:
    _close_unfinished(sessions, bid, "expired", "batch_expired", ("in_progress", "validating"))
    with sessions() as s:
        status = s.scalar(select(Batch.status).where(Batch.id == bid))
    if status in ("in_progress", "validating"):
        _finish(sessions, store, bid, "expired", "expired_at", status, hooks)


def _complete(sessions: sessionmaker[Session], store: FileStore, bid: str, hooks: WebhookSettings | None) -> None:
    with sessions.begin() as s:
        moved = s.execute(update(Batch).where(Batch.id == bid, Batch.status == "in_progress")
                          .values(status="finalizing", finalizing_at=int(time.time()))).rowcount
    if moved:
        log.info("batch %s finalizing: every request has its result", bid)
    _finish(sessions, store, bid, "completed", "completed_at", "finalizing", hooks)


def _restore_completed(sessions: sessionmaker[Session], store: FileStore, bid: str, _hooks: object) -> None:
    """A cancel that raced the batch's completion overwrote `completed`: it stays completed, its files kept
    (its event was queued when it completed)."""
    with sessions.begin() as s:
        s.execute(update(Batch).where(Batch.id == bid, Batch.status == "cancelling",
                                      Batch.completed_at.is_not(None)).values(status="completed"))
    log.warning("batch %s: a cancel arrived after it completed; it stays completed", bid)


def _due(sessions: sessionmaker[Session]) -> list[tuple[str, object]]:
    """What each batch in a live state needs, from one query (five, one per kind, were a fifth of an idle
    tick's statements); `NOT EXISTS` over the batch's unfinished rows is evaluated for running batches only."""
    now = int(time.time())
    unfinished = select(Request.id).where(Request.batch_id == Batch.id, Request.status.in_(UNFINISHED))
    running = and_(Batch.status == "in_progress", Batch.expires_at > now)
    with sessions() as s:
        rows = s.execute(select(Batch.id, Batch.status, Batch.expires_at, Batch.completed_at,
                                case((running, ~unfinished.exists()), else_=false()).label("done"))
                         .where(Batch.status.in_(("cancelling", "in_progress", "validating", "finalizing")))).all()
    overwritten = [r.id for r in rows if r.status == "cancelling" and r.completed_at is not None]
    cancelling = [r.id for r in rows if r.status == "cancelling" and r.completed_at is None]
    expiring = [r.id for r in rows if r.status in ("in_progress", "validating") and r.expires_at <= now]
    ending = [r.id for r in rows if r.done] + [r.id for r in rows if r.status == "finalizing"]
    return ([(b, _restore_completed) for b in overwritten] + [(b, _cancel) for b in cancelling]
            + [(b, _expire) for b in expiring] + [(b, _complete) for b in ending])


def _close_unfinished(sessions: sessionmaker[Session], batch_id: str, status: str, code: str,
                      while_in: tuple[str, ...]) -> None:
    """Close the batch's unfinished requests, if the batch is still in one of `while_in`."""
    still = select(Batch.id).where(Batch.id == batch_id, Batch.status.in_(while_in)).exists()
    with sessions.begin() as s:
        closed = s.execute(update(Request).where(Request.batch_id == batch_id, Request.status.in_(UNFINISHED), still)
                           .values(status=status, error={"code": code, "message": _MESSAGES[code]},
                                   finished_at=time.time())).rowcount
        counts.add(s, "scheduler", [(batch_id, status, 0, 0, 0)] * closed)


def _finish(sessions: sessionmaker[Session], store: FileStore, batch_id: str, status: str, stamp: str,
            from_status: str | None, hooks: WebhookSettings | None = None) -> None:
    """Write the output and error files, then move the batch from `from_status` to `status` with them."""
    with sessions() as s:
        b = s.get(Batch, batch_id)
        if b is None or b.status != from_status:
            return
        owner, endpoint = b.owner, b.endpoint
    # Each line as blendserve/protocol/batch_lines.py builds it: the same line a reader of a running batch got.
    out_id, err_id = new_id("file-"), new_id("file-")
    out, err = store.open_writer(out_id), store.open_writer(err_id)
    n_out = n_err = 0
    with out, err:
        for r in _rows(sessions, batch_id):
            text = batch_lines.line(r.custom_id, r.status, r.response, r.error)
            if r.status == "completed":
                out.write(text)
                n_out += 1
            else:
                err.write(text)
                n_err += 1
        now = int(time.time())
        files = []
        for writer, fid, n, name in ((out, out_id, n_out, "output"), (err, err_id, n_err, "error")):
            if n:
                files.append(File(id=fid, owner=owner, filename=f"{batch_id}_{name}.jsonl", purpose="batch_output",
                                  bytes=writer.commit(), created_at=now, expires_at=None))
        try:
            with sessions.begin() as s:
                s.add_all(files)
                if s.execute(update(Batch).where(Batch.id == batch_id, Batch.status == from_status).values(
                        status=status, **{stamp: now}, output_file_id=out_id if n_out else None,
                        error_file_id=err_id if n_err else None)).rowcount != 1:
                    raise _Moved
                deliveries.queue(s, hooks, batch_id, status)
        except _Moved:
            for f in files:
                store.delete(f.id)
            log.info("batch %s left %s before it could turn %s; its new files deleted", batch_id, from_status,
                     status)
            return
        except Exception:
            for f in files:
                store.delete(f.id)
            raise
    log.info("batch %s %s: %d output line(s), %d error line(s) (%s)", batch_id, status, n_out, n_err, endpoint)


def _rows(sessions: sessionmaker[Session], batch_id: str):
    """Every request of the batch in line order, a range of PAGE lines at a time: bounded memory, and
    each query touches one range of the (batch, line) index whatever plan the database picks (an
    open-ended `line > last ... LIMIT` page made PostgreSQL scan the whole remaining batch, O(n^2)).

    A long file (a million lines) takes longer than the scheduler lease: the lease is renewed (a
    fenced write transaction, blendserve/scheduler/fencing.py) every few seconds so no standby takes over mid-file.
    """
    with sessions() as s:
        last = s.scalar(select(func.max(Request.line)).where(Request.batch_id == batch_id))
    if last is None:
        return
    renewed = time.time()
    for start in range(0, last + 1, PAGE):
        if time.time() - renewed > RENEW_EVERY_S:
            with sessions.begin():
                pass
            renewed = time.time()
        with sessions() as s:
            page = s.execute(select(Request.line, Request.custom_id, Request.status,
                                    cast(Request.response, Text).label("response"),
                                    cast(Request.error, Text).label("error"))
                             .where(Request.batch_id == batch_id, Request.line >= start, Request.line < start + PAGE)
                             .order_by(Request.line)).all()
        yield from page
