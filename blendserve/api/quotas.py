"""Per-tenant quotas (all optional, BLENDSERVE_QUOTA_*): stored bytes, stored files, queued requests and
queued prompt tokens per model (OpenAI's enqueued token limit).

One tenant must not fill the disk or the queue for everybody. Over a quota
the API answers 429 in OpenAI's error shape with a Retry-After header, before
anything is stored: an upload is refused before its body is read when the
tenant is already at a limit, and mid-stream once its bytes would pass the
bytes left; a batch whose input file would take the tenant's unfinished
requests past the queue quota is refused at create, never half-run.

Usage is read from the tenant's own rows at the moment of the request (its
files, through the owner index; its unfinished batches and their counter
rows), never from a scan of the requests table. Batch output files count
towards stored bytes and files; they are never refused (the work is done),
they only make the next upload wait. Stored bytes also count the bytes of
uploads still streaming and of Uploads API parts, reserved as they arrive
(blendserve/api/holds.py), so concurrent uploads cannot pass the bytes quota
between them. The files quota is checked at the start of each upload: uploads
racing past the last file left can each land.

Queued tokens per model are known only once the scheduler has read a batch's
lines, so a new batch is not priced in advance: it is refused while the
tenant's queued prompt tokens for its model (the model of its first line)
have reached the quota, and admitted below it, so a tenant passes the quota by
at most one batch (itself bounded by the queued-requests quota). Requests not
tokenized yet count their line's bytes, an upper bound of their tokens.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from blendserve.api import holds
from blendserve.api.errors import APIError
from blendserve.core.config import Settings
from blendserve.core.models import Batch, BatchCount, File, Request
from blendserve.core.storage import FileStore

QUEUED = ("validating", "in_progress")    # batches whose requests are still to run
WAITING = ("queued", "pending", "planned")   # requests not run yet
FIRST_LINE_BYTES = 1 << 20                  # read at most this much of an input file for its model
QUEUE_RETRY_S = 60                          # a queued request takes seconds to minutes: ask again in a minute
STORAGE_RETRY_S = (60, 86400)               # until the tenant's next file expires, within these bounds


@dataclass
class Storage:
    files: int
    bytes: int


def storage(session: Session, owner: str) -> Storage:
    files, size = session.execute(select(func.count(), func.coalesce(func.sum(File.bytes), 0))
                                  .where(File.owner == owner)).one()
    return Storage(int(files), int(size))


def _storage_retry(session: Session, owner: str) -> str:
    now = int(time.time())
    nxt = session.scalar(select(func.min(File.expires_at)).where(File.owner == owner, File.expires_at > now))
    lo, hi = STORAGE_RETRY_S
    return str(min(hi, max(lo, nxt - now)) if nxt else 3600)


def check_upload(session: Session, settings: Settings, owner: str) -> int | None:
    """Before an upload's body is read: 429 if the tenant holds its files or bytes already. Returns the bytes
    left (None: no byte quota); the upload reserves what it takes of them as its bytes arrive."""
    if not settings.quota_stored_files and not settings.quota_stored_bytes:
        return None
    check_files(session, settings, owner)
    if settings.quota_stored_bytes:
        left = settings.quota_stored_bytes - holds.used(session, owner, int(time.time()))   # files and holds
        if left <= 0:
            raise storage_full(session, settings, owner)
        return left
    return None


def check_files(session: Session, settings: Settings, owner: str) -> None:
    """429 if the tenant holds its quota of files already (at an upload's start, and when parts become one)."""
    if not settings.quota_stored_files:
        return
    files = storage(session, owner).files
    if files >= settings.quota_stored_files:
        raise APIError(429, f"This tenant stores {files} files, its quota of {settings.quota_stored_files}; "
                       "delete files, or wait for some to expire.", code="file_quota_exceeded",
                       type="insufficient_quota", headers={"Retry-After": _storage_retry(session, owner)})


def storage_full(session: Session, settings: Settings, owner: str) -> APIError:
    return APIError(429, f"This upload would take the tenant past its quota of {settings.quota_stored_bytes} "
                    "stored bytes; delete files, or wait for some to expire.", param="file",
                    code="storage_quota_exceeded", type="insufficient_quota",
                    headers={"Retry-After": _storage_retry(session, owner)})


def queued_requests(session: Session, owner: str) -> int:
    """Requests of the tenant's batches that are not finished: each batch's total (its input's line count
    while it validates) less what its counter rows say has finished."""
    rows = session.execute(select(Batch.id, Batch.total, File.lines).outerjoin(File, File.id == Batch.input_file_id)
                           .where(Batch.owner == owner, Batch.status.in_(QUEUED))).all()
    if not rows:
        return 0
    done = dict(session.execute(select(BatchCount.batch_id, func.sum(BatchCount.completed + BatchCount.failed))
                                .where(BatchCount.batch_id.in_([r.id for r in rows]))
                                .group_by(BatchCount.batch_id)).all())
    return sum(max(0, (r.total or r.lines or 0) - int(done.get(r.id) or 0)) for r in rows)


def file_lines(store: FileStore, f: File) -> int:
    """Lines of an input file: stored at upload; counted from the store for files older than that."""
    if f.lines is not None:
        return f.lines
    n, last = 0, b"\n"
    with open(store.path(f.id), "rb") as fh:
        while chunk := fh.read(1 << 20):
            n += chunk.count(b"\n")
            last = chunk[-1:]
    return n + (last != b"\n")


def check_queue(session: Session, settings: Settings, store: FileStore, owner: str, f: File) -> None:
    """At batch create: 429 if the batch's requests would take the tenant past its queued-requests quota."""
    limit = settings.quota_queued_requests
    if not limit:
        return
    adding = file_lines(store, f)
    if adding > limit:
        raise APIError(400, f"This batch has {adding} requests, more than the tenant's queue quota of {limit}; "
                       "split the file.", param="input_file_id", code="queue_quota_exceeded")
    queued = queued_requests(session, owner)
    if queued + adding > limit:
        raise APIError(429, f"This batch's {adding} requests would take the tenant's queued requests to "
                       f"{queued + adding}, past its quota of {limit}; create it once earlier batches have run.",
                       param="input_file_id", code="queue_quota_exceeded", type="requests",
                       headers={"Retry-After": str(QUEUE_RETRY_S)})


def first_model(store: FileStore, f: File) -> str | None:
    """The model of an input file's first line (one batch, one model); None if it cannot be read."""
    with open(store.path(f.id), "rb") as fh:
        line = fh.readline(FIRST_LINE_BYTES)
    try:
        model = json.loads(line).get("body", {}).get("model")
    except (ValueError, AttributeError):
        return None
    return model if isinstance(model, str) else None


def queued_tokens(session: Session, owner: str, model: str) -> int:
    """Prompt tokens of the tenant's requests of this model still to run (a line's bytes until tokenized)."""
    return int(session.scalar(
        select(func.coalesce(func.sum(func.coalesce(Request.prompt_tokens, Request.input_length, 0)), 0))
        .join(Batch, Batch.id == Request.batch_id)
        .where(Batch.owner == owner, Batch.status.in_(QUEUED), Request.model == model,
               Request.status.in_(WAITING))) or 0)


def check_tokens(session: Session, settings: Settings, store: FileStore, owner: str, f: File) -> None:
    """At batch create: 429 while the tenant's queued prompt tokens for the batch's model are at the quota."""
    limit = settings.quota_queued_tokens
    if not limit:
        return
    model = first_model(store, f)
    if model is None:          # validation will fail the batch with the reason
        return
    queued = queued_tokens(session, owner, model)
    if queued >= limit:
        raise APIError(429, f"Enqueued token limit reached for {model[:128]}: this tenant has {queued} prompt "
                       f"tokens queued, its quota is {limit}; create the batch once earlier batches have run.",
                       param="input_file_id", code="token_limit_exceeded", type="tokens",
                       headers={"Retry-After": str(QUEUE_RETRY_S)})
