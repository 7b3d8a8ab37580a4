"""The poison-request path of a worker: a request that ended an engine stream without a result runs alone.

When a stream raises, every request it was running gets one attempt counted (`requests.attempts`) and
its chunks go back to `pending`. A request with attempts runs alone, in a stream of its own, its attempt
counted before it starts (so a try that kills the process counts too); at MAX_ATTEMPTS it fails with its
own error line. Its neighbours, its batch and every other batch carry on (docs/design.md §6.4).

Interactive calls the failed stream was running run again at once, each alone, before any other work
(docs/design.md §12.1): the one that fails alone gets a 500 of its own, not a 503 the API would carry to
the next worker, and the others their answer. A streamed call whose caller already has tokens ends with
an error event instead: a rerun could not continue its text.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from blendserve.core.models import Request
from blendserve.worker.engines.base import Engine, GenRequest
from blendserve.worker.engines.driver import failure
from blendserve.worker.interactive import InteractiveServer
from blendserve.worker.ledger import Ledger
from blendserve.worker.ranks import LiveBatches
from blendserve.worker.sink import ResultSink

log = logging.getLogger("blendserve.worker")

MAX_ATTEMPTS = 3        # engine tries of one request before it fails alone


@dataclass
class Suspect:
    """A request that ended a stream without a result before: it runs alone."""
    cid: int
    request: GenRequest
    batch_id: str
    endpoint: str
    attempts: int


class PoisonRunner:
    """Failed streams and the suspects they leave, for one rank: it gets the engine, the rank's ledger and
    result sink, and how to ask whether a request is still wanted (`cancelled`) and the rank is stopping."""

    def __init__(self, sessions: sessionmaker[Session], engine: Engine, ledger: Ledger, sink: ResultSink,
                 live: LiveBatches, stopping: Callable[[], bool], cancelled: Callable[[int], bool],
                 interactive: InteractiveServer | None) -> None:
        self.sessions, self.engine, self.ledger, self.sink, self.live = sessions, engine, ledger, sink, live
        self.stopping, self.cancelled, self.interactive = stopping, cancelled, interactive
        self.suspects: list[Suspect] = []
        self.calls: list[GenRequest] = []       # interactive requests of a failed stream, to run alone

    def after_failure(self, give_back_all: Callable[[], None]) -> None:
        """Count an attempt for every request the failed stream was running; hand every held chunk back
        (`give_back_all`). Interactive calls the stream was running run again alone (`run_calls`), but for
        streamed ones whose caller already has tokens: those end with an error event."""
        if self.interactive is not None:
            for request in self.interactive.taken():
                if request.key in self.interactive.sent:
                    self.interactive.abort(request.key, "The engine failed while running this request.")
                else:
                    self.calls.append(request)
        self.sink.drain()
        running = list(self.ledger.meta)
        try:
            with self.sessions.begin() as s:
                s.execute(update(Request).where(Request.id.in_(running), Request.status == "planned")
                          .values(attempts=Request.attempts + 1))
        except Exception:
            log.exception("could not count the failed attempts; the chunks' leases will lapse")
        give_back_all()

    def run_calls(self) -> None:
        """Each interactive request of a failed stream alone: its result, or (it raised again) its own 500."""
        while self.calls and self.interactive is not None:
            request = self.calls.pop(0)
            try:
                results = list(self.engine.generate([request], cancelled=self.cancelled))
            except Exception as e:
                log.warning("interactive request %d failed alone: %s: %s", request.key, type(e).__name__, e)
                self.interactive.finish(failure(request.key, e, len(request.input_ids)))
                continue
            for res in results:
                self.sink.write(res)
        self.calls.clear()

    def run(self) -> bool:
        """Run every suspect alone; whether there were any."""
        ran = bool(self.suspects)
        while self.suspects and not self.stopping():
            self._run_alone(self.suspects.pop(0))
        return ran

    def _run_alone(self, job: Suspect) -> None:
        key, error = job.request.key, "it ended the engine's stream without a result"
        while not self.ledger.lost(job.cid) and not self.stopping() and job.batch_id in self.live:
            if job.attempts >= MAX_ATTEMPTS:
                self.sink.failed(job.cid, key, f"The engine failed on this request {job.attempts} times; "
                                               f"last: {error}.", counted=True)
                return
            job.attempts += 1
            self._set_attempts(key, job.attempts)     # before the try: one that kills the worker counts too
            self.ledger.run(key, job.cid, job.batch_id, job.endpoint)
            try:
                results = list(self.engine.generate([job.request], cancelled=self.cancelled))
            except Exception as e:
                self.ledger.meta.pop(key, None)
                error = f"{type(e).__name__}: {e}"
                log.warning("request %d failed alone (attempt %d of %d): %s", key, job.attempts, MAX_ATTEMPTS, error)
                continue
            if results:
                self.sink.write(results[0])
            elif self.stopping():
                self._set_attempts(key, job.attempts - 1)   # dropped by the stop: not a try
            return                                          # written, or dropped and settled by `cancelled`
        self.ledger.settled(job.cid)                        # never ran: settle it; its chunk goes back

    def _set_attempts(self, key: int, attempts: int) -> None:
        with self.sessions.begin() as s:
            s.execute(update(Request).where(Request.id == key, Request.status == "planned")
                      .values(attempts=attempts))
