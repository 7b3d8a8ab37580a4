"""The validating phase: turn an uploaded file into request rows, or fail the batch.

Runs in the scheduler, off the request path. Rows are inserted in groups of
short transactions (a long one would hold SQLite's write lock for the whole
file); the batch stays `validating` meanwhile, so no planner sees them, and a
restart simply deletes the partial rows and starts over.
"""
from __future__ import annotations

import logging
import time
from typing import Callable

import numpy as np
from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session, sessionmaker

from core.config import Settings
from core.models import Batch, File, Request
from core.storage import FileStore
from scheduler.validation import MAX_ERRORS, LineError, ModelInfo, ValidRequest, validate

log = logging.getLogger("blendserve.scheduler")

INSERT_GROUP = 1000


def pack_ids(ids: list[int]) -> bytes:
    return np.asarray(ids, dtype="<i4").tobytes()


def next_validating(sessions: sessionmaker[Session]) -> str | None:
    with sessions() as s:
        return s.scalars(select(Batch.id).where(Batch.status == "validating")
                         .order_by(Batch.created_at, Batch.id).limit(1)).first()


def validate_batch(batch_id: str, sessions: sessionmaker[Session], store: FileStore, settings: Settings,
                   models: Callable[[], dict[str, ModelInfo]]) -> None:
    with sessions.begin() as s:
        b = s.get(Batch, batch_id)
        endpoint, file_id = b.endpoint, b.input_file_id
        s.execute(delete(Request).where(Request.batch_id == batch_id))
        has_file = s.get(File, file_id) is not None and store.path(file_id).exists()
    errors: list[dict] = []
    total, model, t0 = 0, None, time.time()
    if not has_file:
        errors.append(LineError(0, "file_not_found", f"The input file '{file_id}' no longer exists.").as_dict())
    else:
        rows: list[dict] = []
        with store.open(file_id) as f:
            for item in validate(f, endpoint, models(), settings.max_requests_per_file):
                if isinstance(item, LineError):
                    if len(errors) < MAX_ERRORS:
                        errors.append(item.as_dict())
                    continue
                if errors:
                    continue        # the batch fails anyway: keep checking, stop storing
                model = item.model
                rows.append(_row(batch_id, item))
                if len(rows) >= INSERT_GROUP:
                    total += _insert(sessions, rows)
                    if _status(sessions, batch_id) != "validating":
                        break       # cancelled meanwhile
        if not errors and rows:
            total += _insert(sessions, rows)
    now = int(time.time())
    with sessions.begin() as s:
        b = s.get(Batch, batch_id)
        if b.status == "cancelling":
            s.execute(delete(Request).where(Request.batch_id == batch_id))
            return                  # nothing was admitted; lifecycle finishes the cancel
        if errors:
            s.execute(delete(Request).where(Request.batch_id == batch_id))
            errors.sort(key=lambda e: e["line"])
            b.status, b.failed_at, b.errors = "failed", now, errors
            log.info("batch %s failed validation: %d error(s)", batch_id, len(errors))
        else:
            b.status, b.in_progress_at, b.model, b.total = "in_progress", now, model, total
            log.info("batch %s valid: %d requests in %.1fs", batch_id, total, time.time() - t0)


def _row(batch_id: str, r: ValidRequest) -> dict:
    return {"batch_id": batch_id, "line": r.line, "custom_id": r.custom_id, "model": r.model, "body": r.body,
            "prompt_ids": pack_ids(r.prompt_ids), "prompt_tokens": len(r.prompt_ids), "max_tokens": r.max_tokens,
            "status": "pending", "completion_tokens": 0, "cached_tokens": 0}


def _insert(sessions: sessionmaker[Session], rows: list[dict]) -> int:
    n = len(rows)
    with sessions.begin() as s:
        s.execute(insert(Request), rows)
    rows.clear()
    return n


def _status(sessions: sessionmaker[Session], batch_id: str) -> str:
    with sessions() as s:
        return s.scalar(select(Batch.status).where(Batch.id == batch_id))
