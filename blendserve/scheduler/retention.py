"""Retention, as OpenAI does it: files expire, and expired files and their rows are deleted.

- An upload's expires_at comes from its `expires_after` (purpose=batch files
  default to BLENDSERVE_FILE_EXPIRY_SECONDS, 30 days, as OpenAI's do).
- A batch's `output_expires_after` is stamped onto its output and error files
  here, as soon as they exist (the same tick that finalizes the batch).
- Expired files are deleted, row first (the API stops listing it), then bytes;
  a file that is the input of a batch still running is kept until the batch ends.
- Temporary files of writers that died are swept at the first pass and every
  pass after (see FileStore.sweep_temp).

A pass runs at most every SWEEP_INTERVAL_S and deletes at most BATCH files,
so a scheduler tick stays short whatever the backlog.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from sqlalchemy import delete, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from blendserve.core.models import Batch, File
from blendserve.core.storage import FileStore

log = logging.getLogger("blendserve.scheduler")

SWEEP_INTERVAL_S = 30.0
BATCH = 500
RUNNING = ("validating", "in_progress", "finalizing", "cancelling")
_next_pass: dict[str, float] = {}     # per file store: a scheduler process runs one pass per interval


@dataclass
class Swept:
    stamped: int = 0
    deleted: int = 0
    temp: int = 0


def sweep_if_due(sessions: sessionmaker[Session], store: FileStore) -> Swept:
    """The scheduler tick's call: output files get their expiry every tick (so a finished batch's files show
    it at once); deletion runs when a pass is due (the first at once, so start-up sweeps)."""
    key, now = str(store.root), time.time()
    if now < _next_pass.get(key, 0.0):
        return Swept(stamped=stamp_outputs(sessions))
    _next_pass[key] = now + SWEEP_INTERVAL_S
    return sweep(sessions, store, int(now))


def sweep(sessions: sessionmaker[Session], store: FileStore, now: int) -> Swept:
    out = Swept(stamped=stamp_outputs(sessions), temp=store.sweep_temp())
    with sessions() as s:
        running_inputs = select(Batch.input_file_id).where(Batch.status.in_(RUNNING))
        expired = s.scalars(select(File.id).where(File.expires_at <= now, File.id.not_in(running_inputs))
                            .order_by(File.expires_at).limit(BATCH)).all()
    for file_id in expired:
        with sessions.begin() as s:
            gone = s.execute(delete(File).where(File.id == file_id, File.expires_at <= now)).rowcount
        if gone:
            store.delete(file_id)
            out.deleted += 1
    if out.stamped or out.deleted or out.temp:
        log.info("retention: %d output file(s) given an expiry, %d expired file(s) deleted, %d temp file(s) swept",
                 out.stamped, out.deleted, out.temp)
    return out


def stamp_outputs(sessions: sessionmaker[Session]) -> int:
    """expires_at = created_at + output_expires_after for the output and error files of batches that set it."""
    with sessions() as s:
        rows = s.execute(
            select(File.id, File.created_at, Batch.output_expires_after_s)
            .join(Batch, or_(Batch.output_file_id == File.id, Batch.error_file_id == File.id))
            .where(Batch.output_expires_after_s.is_not(None), File.expires_at.is_(None))).all()
    if rows:
        with sessions.begin() as s:
            for file_id, created, seconds in rows:
                s.execute(update(File).where(File.id == file_id, File.expires_at.is_(None))
                          .values(expires_at=created + seconds))
    return len(rows)
