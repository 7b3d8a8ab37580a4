"""Result writes: every rank of a worker process writes through one writer, many results to a transaction.

A rank used to write its results itself, whatever was queued when its writer
thread woke: at cluster rates that was one to three results per transaction
(each rank sees a few dozen results a second), so every result paid for a
connection checkout, a lock read, an update, a counter upsert and a commit,
on the worker's CPU and on the database's. Here the results of all the
process's ranks wait up to LINGER_S for company, then go in one transaction
of one statement per kind: the write only claims rows still `planned` (the
status guard), so a result written twice (a re-run chunk, a lost lease) is
stored and counted once.

A write that fails is retried with backoff; when every try failed, the rows
stay `planned` and their chunks go back to `pending` when released (their
callers settle them as usual), so they run again.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import orjson
from sqlalchemy import bindparam, select, text, update
from sqlalchemy.orm import Session, sessionmaker

from core import counts
from core.models import Request

log = logging.getLogger("blendserve.worker")

LINGER_S = 0.05         # how long the first queued result waits for others to share its transaction
MAX_ROWS = 1024         # results in one transaction at most
WRITE_TRIES = 5         # tries of one transaction, with backoff, before its chunks are handed back

_RESULT = (update(Request).where(Request.id == bindparam("b_id"), Request.status == "planned")
           .values(status=bindparam("b_status"), response=bindparam("b_response"), error=bindparam("b_error"),
                   completion_tokens=bindparam("b_out"), cached_tokens=bindparam("b_cached"),
                   finished_at=bindparam("b_at")))


@dataclass
class _Item:
    writer: str                         # the rank's worker id (its batch counters' row)
    row: dict[str, Any]
    settle: Callable[[], None]          # called once the write ended, stored or not


# PostgreSQL: every result of the transaction in one statement (arrays in, a join on the request id),
# instead of a pipeline of one UPDATE per row; the JSON bodies arrive as text, serialized by orjson.
_RESULTS_PG = text("""
UPDATE requests AS r SET status = v.status, response = v.response::json, error = v.error::json,
       completion_tokens = v.out, cached_tokens = v.cached, finished_at = :at
FROM unnest(CAST(:ids AS bigint[]), CAST(:statuses AS text[]), CAST(:responses AS text[]),
            CAST(:errors AS text[]), CAST(:outs AS integer[]), CAST(:cached AS integer[]))
     AS v(id, status, response, error, out, cached)
WHERE r.id = v.id AND r.status = 'planned'""")


def _json(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


def store(s: Session, items: list[tuple[str, dict[str, Any]]], at: float) -> int:
    """One transaction's work: lock the rows still `planned` (the others have a result already), write
    their results and add them to the batches' counters, per writer. Returns how many rows were won.

    The lock comes first, in id order, so two writers that hold results for
    the same rows (a re-run chunk beside a lost lease) queue instead of
    deadlocking; a request given two results here keeps the first.
    """
    ids = sorted({row["b_id"] for _, row in items})
    won = {r.id: r for r in s.execute(select(Request.id, Request.batch_id, Request.prompt_tokens)
                                      .where(Request.id.in_(ids), Request.status == "planned")
                                      .order_by(Request.id).with_for_update())}
    mine, by_writer = [], {}
    for writer, row in items:
        if (r := won.pop(row["b_id"], None)) is None:          # another result won the row, or this one twice
            continue
        mine.append(row)
        by_writer.setdefault(writer, []).append((r.batch_id, row["b_status"], r.prompt_tokens, row["b_cached"],
                                                 row["b_out"]))
    if not mine:
        return 0
    if s.get_bind().dialect.name == "postgresql":
        s.execute(_RESULTS_PG, {"at": at, "ids": [r["b_id"] for r in mine], "statuses": [r["b_status"] for r in mine],
                                "responses": [_json(r["b_response"]) for r in mine],
                                "errors": [_json(r["b_error"]) for r in mine], "outs": [r["b_out"] for r in mine],
                                "cached": [r["b_cached"] for r in mine]})
    else:
        s.connection().execute(_RESULT, [{**row, "b_at": at} for row in mine])
    for writer, finished in sorted(by_writer.items()):
        counts.add(s, writer, finished)
    return len(mine)


@dataclass
class ResultWriter:
    """One thread per process and database; ranks `put` results and `drain` before they hand chunks back."""
    sessions: sessionmaker[Session]
    linger_s: float = LINGER_S
    _items: list[_Item] = field(default_factory=list)
    _queued: dict[str, int] = field(default_factory=dict)       # per writer: put but not yet settled
    _cv: threading.Condition = field(default_factory=threading.Condition)
    _thread: threading.Thread | None = None

    def put(self, writer: str, row: dict[str, Any], settle: Callable[[], None]) -> None:
        with self._cv:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True, name="result-writer")
                self._thread.start()
            self._items.append(_Item(writer, row, settle))
            self._queued[writer] = self._queued.get(writer, 0) + 1
            self._cv.notify_all()

    def drain(self, writer: str) -> None:
        """Wait until every result `writer` put so far is written (or given up) and settled."""
        with self._cv:
            self._cv.wait_for(lambda: not self._queued.get(writer))

    def _run(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._items)
                first = time.monotonic()
                while len(self._items) < MAX_ROWS and (left := first + self.linger_s - time.monotonic()) > 0:
                    self._cv.wait(left)
                batch, self._items = self._items[:MAX_ROWS], self._items[MAX_ROWS:]
            self._write(batch)
            for it in batch:
                try:
                    it.settle()
                except Exception:
                    log.exception("settling a written result failed")
            with self._cv:
                for it in batch:
                    self._queued[it.writer] -= 1
                    if not self._queued[it.writer]:
                        del self._queued[it.writer]
                self._cv.notify_all()

    def _write(self, batch: list[_Item]) -> bool:
        for attempt in range(WRITE_TRIES):
            try:
                with self.sessions.begin() as s:
                    store(s, [(it.writer, it.row) for it in batch], time.time())
                return True
            except Exception:
                log.warning("writing %d result(s) failed (try %d of %d)", len(batch), attempt + 1, WRITE_TRIES,
                            exc_info=True)
                time.sleep(min(0.2 * 2 ** attempt, 5.0))
        log.error("gave up writing %d result(s); their chunks go back to pending", len(batch))
        return False


_WRITERS: dict[int, ResultWriter] = {}
_LOCK = threading.Lock()


def shared(sessions: sessionmaker[Session]) -> ResultWriter:
    """The process's writer for this database (ranks of one process share one engine: core.db.shared_engine)."""
    key = id(sessions.kw["bind"])
    with _LOCK:
        if key not in _WRITERS:
            _WRITERS[key] = ResultWriter(sessions)
        return _WRITERS[key]
