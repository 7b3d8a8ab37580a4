"""Intake: turn an uploaded file into request rows (or fail the batch), then tokenize them.

Runs in the scheduler, off the request path, in two steps:
- validate_batch checks every line and inserts the rows in groups of short
  transactions (a long one would hold SQLite's write lock for the whole
  file); the batch stays `validating` meanwhile, so no planner sees them, and
  a restart simply deletes the partial rows and starts over. Rows whose
  prompt was not tokenized during validation (see blendserve/scheduler/validation.py)
  enter as `queued`, the others as `pending`. A row keeps the body's
  parameters but not its prompt: that stays in the input file, which the
  upload already wrote, and is read back by offset (storing 200 MB twice
  would halve validation's speed).
- tokenize_queued turns `queued` rows of running batches into `pending` ones
  with their token ids, oldest batch first, a bounded slice per scheduler
  tick, so planning, cancels and expiry stay responsive while a 50,000-line
  file is tokenized and its first requests already run.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

import numpy as np
import orjson
from sqlalchemy import bindparam, delete, select, text, update
from sqlalchemy.orm import Session, sessionmaker

from blendserve.core import counts, deliveries
from blendserve.core.config import Settings
from blendserve.core.models import Batch, File, Request
from blendserve.core.storage import FileStore
from blendserve.core.webhook_settings import WebhookSettings
from blendserve.protocol.embeddings import token_count  # an embeddings row joins its inputs
from blendserve.scheduler.statistics import refresh_statistics
from blendserve.scheduler.validation import (
    MAX_ERRORS,
    LineError,
    ModelInfo,
    ValidRequest,
    context_error,
    read_body,
    tokenize_each,
    validate,
)

log = logging.getLogger("blendserve.scheduler")

INSERT_GROUP = 1000
TOKENIZE_GROUP = 1024

# PostgreSQL: a group's token ids in one statement (arrays in, a join on the request id) instead of a
# pipeline of one UPDATE per row, which cost about as much of the scheduler's time as the tokenizer.
_READY_PG = text("""
UPDATE requests AS r SET status = 'pending', prompt_ids = v.ids, prompt_tokens = v.n, max_tokens = v.mt
FROM unnest(CAST(:rids AS bigint[]), CAST(:ids AS bytea[]), CAST(:ns AS integer[]), CAST(:mts AS integer[]))
     AS v(rid, ids, n, mt)
WHERE r.id = v.rid AND r.status = 'queued'""")


def pack_ids(ids: list[int]) -> bytes:
    return np.asarray(ids, dtype="<i4").tobytes()


def next_validating(sessions: sessionmaker[Session], skip: set[str] = frozenset()) -> str | None:
    """The oldest batch to validate, but for those in `skip` (they raised, and wait to retry)."""
    q = select(Batch.id).where(Batch.status == "validating")
    if skip:
        q = q.where(Batch.id.not_in(skip))
    with sessions() as s:
        return s.scalars(q.order_by(Batch.created_at, Batch.id).limit(1)).first()


def fail_batch(sessions: sessionmaker[Session], batch_id: str, message: str,
               hooks: WebhookSettings | None = None) -> None:
    """Give up on a batch that validation keeps raising on: it fails with one error, nothing runs."""
    with sessions.begin() as s:
        s.execute(delete(Request).where(Request.batch_id == batch_id))
        if s.execute(update(Batch).where(Batch.id == batch_id, Batch.status == "validating").values(
                status="failed", failed_at=int(time.time()),
                errors=[{"code": "server_error", "message": message, "param": None, "line": None}])).rowcount:
            deliveries.queue(s, hooks, batch_id, "failed")
    log.error("batch %s failed: %s", batch_id, message)


def validate_batch(batch_id: str, sessions: sessionmaker[Session], store: FileStore, settings: Settings,
                   models: Callable[[], dict[str, ModelInfo]]) -> None:
    with sessions.begin() as s:
        b = s.get(Batch, batch_id)
        endpoint, file_id = b.endpoint, b.input_file_id
        s.execute(delete(Request).where(Request.batch_id == batch_id))
        has_file = s.get(File, file_id) is not None and store.path(file_id).exists()
    errors: list[dict] = []
    total, n_failed, model, t0 = 0, 0, None, time.time()
    if not has_file:
        errors.append(LineError(0, "file_not_found", f"The input file '{file_id}' no longer exists.").as_dict())
    else:
        rows: list[tuple] = []
        with store.open(file_id) as f:
            for item in validate(f, endpoint, models(), settings.max_requests_per_file):
                if isinstance(item, LineError) and item.fails_file:
                    if len(errors) < MAX_ERRORS:
                        errors.append(item.as_dict())
                    continue
                if errors:
                    continue        # the batch fails anyway: keep checking, stop storing
                if isinstance(item, ValidRequest):
                    model = item.model
                    rows.append(_row(batch_id, item))
                else:               # the request's own failure: its error line, the rest runs
                    model = model or item.model
                    n_failed += 1
                    rows.append(_failed_row(batch_id, item))
                if len(rows) >= INSERT_GROUP:
                    total += len(rows)
                    status, rows = _insert(sessions, batch_id, rows), []
                    if status != "validating":
                        break       # cancelled meanwhile
        if not errors and rows:
            total += len(rows)
            _insert(sessions, batch_id, rows)
    now = int(time.time())
    # Conditional: a cancel (or expiry) that landed meanwhile wins; nothing was admitted then.
    still = update(Batch).where(Batch.id == batch_id, Batch.status == "validating")
    with sessions.begin() as s:
        if errors:
            errors.sort(key=lambda e: e["line"])
            moved = s.execute(still.values(status="failed", failed_at=now, errors=errors)).rowcount == 0
            if not moved:
                deliveries.queue(s, settings.webhook, batch_id, "failed")
        else:
            moved = s.execute(still.values(status="in_progress", in_progress_at=now, model=model,
                                           total=total)).rowcount == 0
            if not moved and n_failed:      # counted with the move: a restarted validation counts afresh
                counts.add(s, "scheduler", [(batch_id, "failed", 0, 0, 0)] * n_failed)
        if errors or moved:
            s.execute(delete(Request).where(Request.batch_id == batch_id))
    if moved:
        log.info("batch %s left validating meanwhile (cancelled or expired); nothing admitted", batch_id)
    elif errors:
        log.info("batch %s failed validation: %d error(s)", batch_id, len(errors))
    else:
        log.info("batch %s valid: %d requests in %.1fs", batch_id, total, time.time() - t0)
        refresh_statistics(sessions, total)


ROW_COLUMNS = ("batch_id", "line", "custom_id", "model", "body", "input_offset", "input_length", "prompt_ids",
               "prompt_tokens", "max_tokens", "status", "completion_tokens", "cached_tokens", "error", "finished_at")


def _row(batch_id: str, r: ValidRequest) -> tuple:
    done = r.prompt_ids is not None
    return (batch_id, r.line, r.custom_id, r.model, orjson.dumps(r.params()).decode(), r.offset, r.length,
            pack_ids(r.prompt_ids) if done else None, token_count(r.prompt_ids) if done else None, r.max_tokens,
            "pending" if done else "queued", 0, 0, None, None)


def _failed_row(batch_id: str, e: LineError) -> tuple:
    """A request that failed validation on its own: final at once, its error written as the error line's
    `response` (blendserve/scheduler/lifecycle.py)."""
    err = orjson.dumps({"code": e.code, "message": e.message, "param": e.param}).decode()
    return (batch_id, e.line, e.custom_id, (e.model or "")[:256], "{}", None, None, None, None, None, "failed", 0, 0,
            err, time.time())


class Progress:
    """Where tokenizing stands in each running batch, kept by the scheduler between ticks.

    `after[b]` is the last line tokenized in batch b: no row at or before it is still queued (a group's
    rows all leave `queued` in one transaction, and rows enter `queued` only when the batch is validated,
    before it runs). `finished` holds batches with nothing queued left. Both only save work: an empty
    Progress (a new leader) finds the same rows, once through the lines already done.

    Why: the planner chooses how to find "the next 1,024 queued rows of batch b" from statistics, and
    they are wrong one way or the other while a million-row batch is tokenized (a table analyzed when
    every row was queued says they all still are). The (batch, line) index then filters its way past
    every row already tokenized, and the test of "which batch has queued rows" read every queued row
    (0.6 s each at 300,000 rows done). From `after` onwards either index finds the rows at once.
    """

    def __init__(self) -> None:
        self.after: dict[str, int] = {}
        self.finished: set[str] = set()

    def keep(self, running: list[str]) -> None:
        """Forget batches no longer running."""
        live = set(running)
        self.finished &= live
        self.after = {b: line for b, line in self.after.items() if b in live}


def tokenize_queued(sessions: sessionmaker[Session], store: FileStore, models: dict[str, ModelInfo],
                    budget_s: float = 1.0, progress: Progress | None = None) -> int:
    """Tokenize queued rows of running batches, oldest batch first, a group at least, for about budget_s.

    Returns how many rows left `queued`. The prompts are read back from the
    input file; one deleted meanwhile fails its batch's queued rows.
    """
    progress = progress if progress is not None else Progress()
    done, t0 = 0, time.time()
    while done == 0 or time.time() - t0 < budget_s:
        b, rows = None, []
        with sessions() as s:
            running = s.execute(select(Batch.id, Batch.endpoint, Batch.input_file_id)
                                .where(Batch.status == "in_progress").order_by(Batch.created_at, Batch.id)).all()
            progress.keep([r.id for r in running])
            for b in running:
                if b.id in progress.finished:
                    continue
                rows = s.execute(select(Request.id, Request.line, Request.custom_id, Request.model,
                                        Request.max_tokens, Request.input_offset, Request.input_length)
                                 .where(Request.batch_id == b.id, Request.status == "queued",
                                        Request.line > progress.after.get(b.id, -1))
                                 .order_by(Request.line).limit(TOKENIZE_GROUP)).all()
                if rows:
                    break
                progress.finished.add(b.id)
        if not rows:
            break
        ready, failed = _tokenize_rows(rows, b.endpoint, b.input_file_id, store, models)
        still = (Request.id == bindparam("rid")) & (Request.status == "queued")   # a cancel may have closed it
        with sessions.begin() as s:
            if ready and s.get_bind().dialect.name == "postgresql":
                s.execute(_READY_PG, {k: [r[c] for r in ready] for k, c in
                                      (("rids", "rid"), ("ids", "ids"), ("ns", "n"), ("mts", "mt"))})
            elif ready:
                s.connection().execute(update(Request).where(still).values(
                    status="pending", prompt_ids=bindparam("ids"), prompt_tokens=bindparam("n"),
                    max_tokens=bindparam("mt")), ready)
            if failed:
                won = dict(s.execute(select(Request.id, Request.batch_id).where(
                    Request.id.in_([f["rid"] for f in failed]), Request.status == "queued")
                    .order_by(Request.id).with_for_update()).all())
                failed = [f for f in failed if f["rid"] in won]
                if failed:
                    s.connection().execute(update(Request).where(still).values(
                        status="failed", error=bindparam("err"), finished_at=time.time()), failed)
                    counts.add(s, "scheduler", [(won[f["rid"]], "failed", 0, 0, 0) for f in failed])
        progress.after[b.id] = rows[-1].line
        done += len(rows)
    return done


def _tokenize_rows(rows, endpoint: str, file_id: str, store: FileStore,
                   models: dict[str, ModelInfo]) -> tuple[list[dict], list[dict]]:
    """Update parameters for rows that became pending and rows that failed (each with its error)."""
    def fail(code: str, message: str, of=rows) -> list[dict]:
        return [{"rid": r.id, "err": {"code": code, "message": message}} for r in of]

    info = models.get(rows[0].model)         # one model per batch
    if info is None:
        return [], fail("model_not_found", f"The model '{rows[0].model}' is no longer served here.")
    try:
        with store.open(file_id) as f:
            bodies = [read_body(_read(f, r.input_offset, r.input_length)) for r in rows]
    except FileNotFoundError:
        return [], fail("file_not_found", "The input file was deleted before this request was read.")
    all_ids = tokenize_each(endpoint, bodies, info)    # a tokenizer failure fails only its culprits
    ready, failed = [], []
    for r, body, ids in zip(rows, bodies, all_ids):
        if isinstance(ids, Exception):
            failed += fail("tokenization_failed", f"The prompt could not be tokenized: {ids}", [r])
        elif err := context_error(v := ValidRequest(r.line, r.custom_id, body, r.model, r.max_tokens,
                                                    prompt_ids=ids), info):
            failed += fail(err.code, err.message, [r])
        else:
            ready.append({"rid": r.id, "ids": pack_ids(ids), "n": token_count(ids), "mt": v.max_tokens})
    return ready, failed


def _read(f, offset: int, length: int) -> bytes:
    f.seek(offset)
    return f.read(length)


def _insert(sessions: sessionmaker[Session], batch_id: str, rows: list[tuple]) -> str:
    """Insert the rows; returns the batch's status, to notice a cancel.

    Straight through the DB-API cursor: SQLAlchemy's per-row parameter
    processing costs as much as the database's own insert, and this is the
    hot loop of validation.
    """
    with sessions.begin() as s:
        conn = s.connection()
        mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
        conn.connection.cursor().executemany(
            f"INSERT INTO requests ({', '.join(ROW_COLUMNS)}) VALUES ({', '.join([mark] * len(ROW_COLUMNS))})", rows)
        return s.scalar(select(Batch.status).where(Batch.id == batch_id))
