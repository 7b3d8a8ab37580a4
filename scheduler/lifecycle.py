"""Time- and state-driven batch transitions: cancel, expire, finalize.

Each transition first settles the request rows (a short transaction), then
writes the output and error files, then flips the batch status with the file
ids in one transaction. A crash anywhere in between leaves the batch in a
state this module picks up again on the next tick, so nothing is lost and no
batch ends without its files.
"""
from __future__ import annotations

import json
import logging
import time

from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from core.ids import new_id
from core.jobs import UNFINISHED
from core.models import Batch, File, Request
from core.storage import FileStore

log = logging.getLogger("blendserve.scheduler")

PAGE = 1000
_MESSAGES = {"batch_expired": "This request could not be executed before the completion window expired.",
             "batch_cancelled": "This request was not executed because the batch was cancelled."}


def settle(sessions: sessionmaker[Session], store: FileStore) -> None:
    """One pass over every batch that needs a transition."""
    now = int(time.time())
    with sessions() as s:
        cancelling = s.scalars(select(Batch.id).where(Batch.status == "cancelling")).all()
        expiring = s.scalars(select(Batch.id).where(Batch.status.in_(("in_progress", "validating")),
                                                    Batch.expires_at <= now)).all()
        finalizing = s.scalars(select(Batch.id).where(Batch.status == "finalizing")).all()
        unfinished = select(Request.id).where(Request.batch_id == Batch.id, Request.status.in_(UNFINISHED))
        done = s.scalars(select(Batch.id).where(Batch.status == "in_progress", Batch.expires_at > now,
                                                ~unfinished.exists())).all()
    for bid in cancelling:
        _close_unfinished(sessions, bid, "cancelled", "batch_cancelled")
        _finish(sessions, store, bid, "cancelled", "cancelled_at")
    for bid in expiring:
        _close_unfinished(sessions, bid, "expired", "batch_expired")
        _finish(sessions, store, bid, "expired", "expired_at")
    for bid in done:
        with sessions.begin() as s:
            s.execute(update(Batch).where(Batch.id == bid, Batch.status == "in_progress")
                      .values(status="finalizing", finalizing_at=now))
        finalizing.append(bid)
    for bid in finalizing:
        _finish(sessions, store, bid, "completed", "completed_at")


def _close_unfinished(sessions: sessionmaker[Session], batch_id: str, status: str, code: str) -> None:
    with sessions.begin() as s:
        s.execute(update(Request).where(Request.batch_id == batch_id, Request.status.in_(UNFINISHED))
                  .values(status=status, error={"code": code, "message": _MESSAGES[code]}, finished_at=time.time()))


def _finish(sessions: sessionmaker[Session], store: FileStore, batch_id: str, status: str, stamp: str) -> None:
    with sessions() as s:
        b = s.get(Batch, batch_id)
        owner, endpoint = b.owner, b.endpoint
    # Lines are pure ASCII (json.dumps' default): model text may hold U+2028, U+0085 and the like,
    # which str.splitlines() and many JSONL readers treat as line breaks.
    out_id, err_id = new_id("file-"), new_id("file-")
    out, err = store.open_writer(out_id), store.open_writer(err_id)
    n_out = n_err = 0
    with out, err:
        for r in _rows(sessions, batch_id):
            line = {"id": new_id("batch_req_"), "custom_id": r.custom_id}
            if r.status == "completed":
                line |= {"response": {"status_code": 200, "request_id": new_id("req_"), "body": r.response},
                         "error": None}
                out.write(json.dumps(line).encode() + b"\n")
                n_out += 1
            else:
                line |= {"response": None, "error": r.error}
                err.write(json.dumps(line).encode() + b"\n")
                n_err += 1
        now = int(time.time())
        files = []
        for writer, fid, n, name in ((out, out_id, n_out, "output"), (err, err_id, n_err, "error")):
            if n:
                files.append(File(id=fid, owner=owner, filename=f"{batch_id}_{name}.jsonl", purpose="batch_output",
                                  bytes=writer.commit(), created_at=now, expires_at=None))
        with sessions.begin() as s:
            s.add_all(files)
            s.execute(update(Batch).where(Batch.id == batch_id).values(
                status=status, **{stamp: now}, output_file_id=out_id if n_out else None,
                error_file_id=err_id if n_err else None))
    log.info("batch %s %s: %d output line(s), %d error line(s) (%s)", batch_id, status, n_out, n_err, endpoint)


def _rows(sessions: sessionmaker[Session], batch_id: str):
    """Every request of the batch in line order, a page at a time (bounded memory for 50,000 lines)."""
    last = 0
    while True:
        with sessions() as s:
            page = s.execute(select(Request.line, Request.custom_id, Request.status, Request.response, Request.error)
                             .where(Request.batch_id == batch_id, Request.line > last)
                             .order_by(Request.line).limit(PAGE)).all()
        if not page:
            return
        yield from page
        last = page[-1].line
