"""GET /v1/batches/{batch_id}/output: a batch's finished lines while it runs (and after), resumable by cursor.

Each finished request is one JSONL line, exactly as its batch's output file (completed) or error file
(failed, cancelled, expired) holds it (blendserve/protocol/batch_lines.py), in the order the results
became visible. The order is the scheduler's out_seq (blendserve/scheduler/outputs.py): `after` is the
last out_seq a client read, and the response says where it ends in headers, leaving the line shape alone:

- `X-BlendServe-Cursor`: the out_seq of the response's last line (`after` itself when it has none);
  the next request passes it as `after`. It is stored in the database, so it holds across API restarts.
- `X-BlendServe-Done`: `true` once the batch has ended and this response holds its last line: nothing
  will follow this cursor.

A response holds at most `limit` lines; a client commits its cursor once it has handled the whole body.
Lines finished a moment ago appear once the scheduler has numbered them (its next tick, within a second
or so of an idle scheduler's wait, longer behind a long planning round).
"""
from __future__ import annotations

from fastapi import APIRouter, Query, Response
from sqlalchemy import Text, cast, select
from sqlalchemy.orm import Session

from blendserve.api.deps import OwnerDep, StateDep, read
from blendserve.api.routes.batches import get_owned_batch
from blendserve.api.schemas import ERRORS
from blendserve.core.models import Request
from blendserve.protocol import batch_lines

router = APIRouter(prefix="/v1/batches", tags=["batches"])

CURSOR, DONE = "X-BlendServe-Cursor", "X-BlendServe-Done"
ENDED = ("completed", "failed", "expired", "cancelled")
MAX_CURSOR = 2 ** 62        # inside a BIGINT: a larger `after` is refused (400), never sent to the database
_UNNUMBERED = (Request.out_seq.is_(None), Request.finished_at.is_not(None))   # ix_requests_unnumbered's rows

_HEADERS = {CURSOR: {"description": "the out_seq of the last line (`after` when none): the next `after`",
                     "schema": {"type": "string", "pattern": "^[0-9]+$"}},
            DONE: {"description": "true: the batch ended and no line follows this one",
                   "schema": {"type": "string", "enum": ["true", "false"]}}}


@router.get("/{batch_id}/output", response_class=Response, responses={
    200: {"content": {"application/jsonl": {"schema": {"type": "string"}}}, "headers": _HEADERS}, **ERRORS})
async def batch_output(batch_id: str, st: StateDep, owner: OwnerDep,
                       after: int = Query(0, ge=0, le=MAX_CURSOR, description="the last cursor read; 0: the start"),
                       limit: int = Query(1000, ge=1, le=10_000, description="lines in this response at most")
                       ) -> Response:
    body, cursor, done = await read(st, finished_lines, owner, batch_id, after, limit)
    return Response(body, media_type="application/jsonl",
                    headers={CURSOR: str(cursor), DONE: "true" if done else "false"})


def finished_lines(session: Session, owner: str, batch_id: str, after: int, limit: int) -> tuple[bytes, int, bool]:
    """The lines after `after`, the cursor after them, and whether the batch has ended with the last of them.

    Read in this order so that `done` is never true too early: a batch that has ended finishes no more
    rows; once none of its finished rows waits for a number, the rows read next are all there will be.
    """
    ended = get_owned_batch(session, owner, batch_id).status in ENDED
    waiting = ended and session.scalar(select(select(Request.id).where(Request.batch_id == batch_id, *_UNNUMBERED)
                                              .exists()))
    rows = session.execute(select(Request.out_seq, Request.custom_id, Request.status,
                                  cast(Request.response, Text), cast(Request.error, Text))
                           .where(Request.batch_id == batch_id, Request.out_seq > after)
                           .order_by(Request.out_seq).limit(limit)).all()
    body = b"".join(batch_lines.line(custom_id, status, response, error)
                    for _, custom_id, status, response, error in rows)
    return body, rows[-1][0] if rows else after, ended and not waiting and len(rows) < limit
