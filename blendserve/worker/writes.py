"""Result writes: every rank of a worker process writes through one writer, many results to a transaction.

A rank that wrote its results itself, whatever was queued when its writer
thread woke, would write one to three results per transaction at cluster
rates (each rank sees a few dozen results a second), so every result would
pay for a connection checkout, a lock read, an update, a counter upsert and a
commit, on the worker's CPU and on the database's. So the results of all the
process's ranks wait up to LINGER_S for company, then go in one transaction
of one statement per kind; only while results flow: the first result after a
quiet spell is written at once. The write only claims rows still `planned` (the
status guard), so a result written twice (a re-run chunk, a lost lease) is
stored and counted once.

A write that fails is retried with backoff; when every try failed, the rows
stay `planned` and their chunks go back to `pending` when released (their
callers settle them as usual), so they run again. A write the database refuses
for its data (DataError: a value it cannot store) would fail the same way on
every try and every re-run, stalling every result that shares its transaction:
such a transaction is halved until the culprit stands alone, and that request
fails with its own error line; its neighbours are written.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from sqlalchemy import bindparam, exc, select, text, update
from sqlalchemy.orm import Session, sessionmaker

from blendserve.core import counts
from blendserve.core.models import Request

log = logging.getLogger("blendserve.worker")

LINGER_S = 0.2          # how long the first queued result waits for others to share its transaction
# (0.05 s gave 64 echo ranks about 15 results a transaction: the transaction's fixed cost, on the worker
# and on PostgreSQL, outweighed its rows; a result waits at most this long more, its chunk's release too)
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


# PostgreSQL: the transaction's rows locked by one array of ids, and every result written by one
# statement over one JSON document (orjson encodes it in C; PostgreSQL's json_to_recordset takes it
# apart): psycopg's per-element dumping of six parameter arrays, and an IN list of 1,024 bound ids, were
# the writer's largest Python cost after the per-row updates. The bodies travel as JSON text inside the
# document, not nested: json_to_recordset de-escapes every string of what it parses, nested ones too, and
# refuses \u0000 (a model may well emit NUL), which the json column itself stores verbatim.
_LOCK_PG = text("""
SELECT id, batch_id, prompt_tokens FROM requests
WHERE id = ANY(CAST(:ids AS bigint[])) AND status = 'planned' ORDER BY id FOR UPDATE""")
_RESULTS_PG = text("""
UPDATE requests AS r SET status = v.b_status, response = CAST(v.b_response AS json), error = CAST(v.b_error AS json),
       completion_tokens = v.b_out, cached_tokens = v.b_cached, finished_at = :at
FROM json_to_recordset(CAST(:rows AS json))
     AS v(b_id bigint, b_status text, b_response text, b_error text, b_out integer, b_cached integer)
WHERE r.id = v.b_id AND r.status = 'planned'""")


def _as_text(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


def _pg_rows(rows: list[dict[str, Any]]) -> str:
    """The JSON document of _RESULTS_PG: the bodies as JSON text (see above)."""
    return orjson.dumps([{**row, "b_response": _as_text(row["b_response"]), "b_error": _as_text(row["b_error"])}
                         for row in rows]).decode()


def store(s: Session, items: list[tuple[str, dict[str, Any]]], at: float) -> int:
    """One transaction's work: lock the rows still `planned` (the others have a result already), write
    their results and add them to the batches' counters, per writer. Returns how many rows were won.

    The lock comes first, in id order, so two writers that hold results for
    the same rows (a re-run chunk beside a lost lease) queue instead of
    deadlocking; a request given two results here keeps the first.
    """
    ids = sorted({row["b_id"] for _, row in items})
    pg = s.get_bind().dialect.name == "postgresql"
    if pg:
        locked = s.execute(_LOCK_PG, {"ids": "{" + ",".join(map(str, ids)) + "}"})
    else:
        locked = s.execute(select(Request.id, Request.batch_id, Request.prompt_tokens)
                           .where(Request.id.in_(ids), Request.status == "planned")
                           .order_by(Request.id).with_for_update())
    won = {r.id: r for r in locked}
    mine, by_writer = [], {}
    for writer, row in items:
        if (r := won.pop(row["b_id"], None)) is None:          # another result won the row, or this one twice
            continue
        mine.append(row)
        by_writer.setdefault(writer, []).append((r.batch_id, row["b_status"], r.prompt_tokens, row["b_cached"],
                                                 row["b_out"]))
    if not mine:
        return 0
    if pg:
        s.execute(_RESULTS_PG, {"at": at, "rows": _pg_rows(mine)})
    else:
        s.connection().execute(_RESULT, [{**row, "b_at": at} for row in mine])
    counts.add_by_writer(s, by_writer)
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
    _last_end: float = float("-inf")                            # when the last transaction ended (monotonic)

    def put(self, writer: str, row: dict[str, Any], settle: Callable[[], None]) -> None:
        with self._cv:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True, name="result-writer")
                self._thread.start()
            self._items.append(_Item(writer, row, settle))
            self._queued[writer] = self._queued.get(writer, 0) + 1
            if len(self._items) == 1 or len(self._items) >= MAX_ROWS:
                self._cv.notify_all()   # the writer waits for a first item or a full batch, nothing between

    def drain(self, writer: str) -> None:
        """Wait until every result `writer` put so far is written (or given up) and settled."""
        with self._cv:
            self._cv.wait_for(lambda: not self._queued.get(writer))

    def _run(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._items)
                first = time.monotonic()
                # After a quiet spell (a batch's first result, a trickle) a result goes at once: there is
                # no company to wait for, and the first result of a batch is what its user waits on.
                linger = self.linger_s if first - self._last_end < self.linger_s else 0.0
                while len(self._items) < MAX_ROWS and (left := first + linger - time.monotonic()) > 0:
                    self._cv.wait(left)
                batch, self._items = self._items[:MAX_ROWS], self._items[MAX_ROWS:]
            self._write(batch)
            self._last_end = time.monotonic()
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
            except exc.DataError as e:      # a value it cannot store: the same on every try (module doc)
                if len(batch) > 1:
                    half = len(batch) // 2
                    return self._write(batch[:half]) & self._write(batch[half:])
                log.error("request %s: its result cannot be stored; it fails alone: %s", batch[0].row["b_id"], e)
                batch = [_Item(batch[0].writer, _unstorable(batch[0].row, e), batch[0].settle)]
            except Exception:
                log.warning("writing %d result(s) failed (try %d of %d)", len(batch), attempt + 1, WRITE_TRIES,
                            exc_info=True)
                time.sleep(min(0.2 * 2 ** attempt, 5.0))
        log.error("gave up writing %d result(s); their chunks go back to pending", len(batch))
        return False


def _unstorable(row: dict[str, Any], e: exc.DataError) -> dict[str, Any]:
    """A failed result in place of one the database refused."""
    cause = e.orig if e.orig is not None else e
    return {"b_id": row["b_id"], "b_status": "failed", "b_response": None, "b_out": 0, "b_cached": 0,
            "b_error": {"code": "server_error",
                        "message": f"The result could not be stored: "
                                   f"{type(cause).__name__}: {str(cause).splitlines()[0][:200]}"}}


_WRITERS: dict[int, ResultWriter] = {}
_LOCK = threading.Lock()


def shared(sessions: sessionmaker[Session]) -> ResultWriter:
    """The process's writer for this database (ranks of one process share one engine: core.db.shared_engine)."""
    key = id(sessions.kw["bind"])
    with _LOCK:
        if key not in _WRITERS:
            _WRITERS[key] = ResultWriter(sessions)
        return _WRITERS[key]
