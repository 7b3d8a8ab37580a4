"""What the ranks of one worker process share: the live-batch check, claims that take turns, the wake-up
condition and the tokenizer side, so 64 echo ranks cost the database and the CPU about what one does.

Ranks of one process (echo load tests) share what they can: the writer (blendserve/worker/writes.py), the
live-batch check, and their empty claims: while one rank's claim just found nothing, its idle
siblings do not ask the database again (see Claims).
"""
from __future__ import annotations

import logging
import random
import threading
import time
from functools import cache
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from blendserve.core.models import Batch
from blendserve.protocol.bodies import model_info
from blendserve.protocol.fields import ModelInfo
from blendserve.worker import claims

log = logging.getLogger("blendserve.worker")

IDLE_BACKOFF = 4         # the longest wait between claims that found nothing, in poll intervals


def idle_wait(poll_s: float, empty_polls: int) -> float:
    """Seconds to wait after `empty_polls` claims in a row found no chunk: doubling from the poll
    interval up to IDLE_BACKOFF of them, with jitter. 64 idle ranks polling every 0.1 s made 640 empty
    claim transactions a second, which took the CPU the scheduler needed to produce their work; the
    cap keeps a separate worker process from idling long beside work (siblings in one process are
    woken at once, see WORK)."""
    return poll_s * min(2 ** max(empty_polls - 1, 0), IDLE_BACKOFF) * random.uniform(0.75, 1.0)


# Process-wide: a rank that claimed a chunk wakes its idle siblings at once (there may be more), so the
# back-off above never leaves ranks of a process idle beside work.
WORK = threading.Condition()


class LiveBatches:
    """Which batches may still run; re-read at most once a second, so cancels land within about a second.
    One per process and database: its ranks share the read (else 64 ranks read it 64 times a second).
    `generation` moves after every read that dropped a batch (the engines' cancel epoch, worker/service.py)."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions, self.ids, self.live, self.checked = sessions, frozenset(), set(), 0.0
        self.generation = 0
        self.reading = threading.Lock()

    def watch(self, batch_ids: set[str]) -> None:
        if not batch_ids <= self.ids:
            self.ids = self.ids | batch_ids
            self.checked = 0.0

    def __contains__(self, batch_id: str) -> bool:
        self.fresh()
        return batch_id in self.live

    def fresh(self) -> int:
        """Re-read the set if it is over a second old; its generation."""
        if time.time() - self.checked > 1.0:
            with self.reading:              # one rank reads; the others wait for its answer
                if time.time() - self.checked > 1.0:
                    self._read()
        return self.generation

    def _read(self) -> None:
        ids = self.ids
        try:
            with self.sessions() as s:
                live = set(s.scalars(select(Batch.id).where(
                    Batch.id.in_(ids), Batch.status == "in_progress", Batch.expires_at > time.time())))
        except Exception:       # keep the last answer; a cancel lands a little later
            log.warning("could not re-read live batches", exc_info=True)
            return
        dropped, self.live = bool(self.live - live), live
        if dropped:             # after the new set is in place: an engine that sees the new generation sees it
            self.generation += 1
        if self.ids is ids:     # a batch watched meanwhile is read again by the next caller
            self.checked = time.time()


class Claims:
    """Claims of one process's ranks, one at a time: a rank does not ask the database for work while a
    sibling's claim found none within the last poll interval.

    64 idle echo ranks each polling the chunk table was most of their CPU (and
    as many empty transactions for the database); a process asks once per
    poll interval after a first empty claim, backing off to once per
    IDLE_BACKOFF intervals while they stay empty. A successful claim clears the mark and
    wakes the siblings (WORK), so they ask at once: there may be more.

    Claims take turns even while they find work. Letting siblings claim side by side
    (only empty probes taking turns) was measured at 64 ranks on 2 cores: the wait
    for a sibling fell, each transaction's grew more (GIL and cores), claim p99 went
    from 595 to 809 ms and results/s from 1,114 to 1,051 (BENCHMARKS.md, Control plane).

    `timing()` tells the calling rank what its last claim was made of (logged with the claim), so a
    slow claim can be told apart: waiting for a sibling's claim, or the transaction itself, and of
    that how much was this thread's CPU (the rest: the database, the GIL, a free core).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.empty_at = float("-inf")
        self.empty = 0          # empty claims in a row: the mark holds longer, as idle_wait does
        self._last = threading.local()

    def claim(self, sessions: sessionmaker[Session], worker_id: str, model: str, lease_s: float,
              poll_s: float) -> claims.Claimed | None:
        t0 = time.perf_counter()
        with self.lock:
            if time.monotonic() - self.empty_at < poll_s * min(2 ** max(self.empty - 1, 0), IDLE_BACKOFF):
                return None
            t1, c1 = time.perf_counter(), time.thread_time()
            got = claims.claim(sessions, worker_id, model, lease_s)
            self._last.ms = ((t1 - t0) * 1e3, (time.perf_counter() - t1) * 1e3, (time.thread_time() - c1) * 1e3)
            self.empty_at, self.empty = (time.monotonic(), self.empty + 1) if got is None else (float("-inf"), 0)
            return got

    def wake(self) -> None:
        """Work was announced (the scheduler's `chunks` bell): the next claim asks the database at once, not
        after the empty mark's back-off (up to IDLE_BACKOFF poll intervals: ~0.8 s of a batch's first result)."""
        with self.lock:
            self.empty_at, self.empty = float("-inf"), 0

    def timing(self) -> tuple[float, float, float]:
        """The calling thread's last claim, in ms: waiting for a sibling's claim, the transaction, and the
        transaction's CPU on this thread."""
        return getattr(self._last, "ms", (0.0, 0.0, 0.0))


_BY_DATABASE: dict[int, tuple[LiveBatches, Claims]] = {}
_LOCK = threading.Lock()


def shared(sessions: sessionmaker[Session]) -> tuple[LiveBatches, Claims]:
    """What the ranks of one process share, per database (they share one engine: blendserve.core.db.shared_engine)."""
    with _LOCK:
        key = id(sessions.kw["bind"])
        if key not in _BY_DATABASE:
            _BY_DATABASE[key] = (LiveBatches(sessions), Claims())
        return _BY_DATABASE[key]


@cache
def tokenizer_side(model: str, path: Path) -> tuple[ModelInfo, Any]:
    """The model's ModelInfo and tokenizer, loaded once per process: the ranks of a process share them
    (loading it in every rank makes 64 echo ranks load it over a hundred times at start, which under
    load outlasts the deployment's readiness wait)."""
    from blendserve.core.modelstore import load_tokenizer

    tokenizer = load_tokenizer(path)
    return model_info(model, path, tokenizer), tokenizer
