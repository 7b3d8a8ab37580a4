"""The poison-request path of a worker: a request that ended an engine stream without a result runs alone.

When a stream raises, every request it was running gets one attempt counted (`requests.attempts`) and
its chunks go back to `pending`. A request with attempts runs alone, in a stream of its own, its attempt
counted before it starts (so a try that kills the process counts too); at MAX_ATTEMPTS it fails with its
own error line. Its neighbours, its batch and every other batch carry on (docs/design.md §6.4).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import update

from blendserve.core.models import Request
from blendserve.worker.engines.base import GenRequest

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


class PoisonRequests:
    """WorkerService's methods for failed streams and the suspects they leave (a mixin: they use its engine,
    sessions, held chunks, writer and result path)."""

    def _after_stream_failure(self) -> None:
        """Count an attempt for every request the failed stream was running; hand every held chunk back.
        Interactive calls in flight fail (their callers get a 503 and may retry)."""
        if self.interactive is not None:
            for key in list(self.interactive.calls):
                self.interactive.abort(key, "The engine failed while running this request.")
        self.writer.drain(self.id)
        running = list(self.meta)
        try:
            with self.sessions.begin() as s:
                s.execute(update(Request).where(Request.id.in_(running), Request.status == "planned")
                          .values(attempts=Request.attempts + 1))
        except Exception:
            log.exception("could not count the failed attempts; the chunks' leases will lapse")
        self._give_back_all()

    def _run_suspects(self) -> bool:
        ran = bool(self.suspects)
        while self.suspects and not self.stop.is_set():
            self._run_alone(self.suspects.pop(0))
        return ran

    def _run_alone(self, job: Suspect) -> None:
        key, error = job.request.key, "it ended the engine's stream without a result"
        while (held := self.held.get(job.cid)) and not held.lost and not self.stop.is_set() \
                and job.batch_id in self.live:
            if job.attempts >= MAX_ATTEMPTS:
                self._settle_failed(job.cid, key, f"The engine failed on this request {job.attempts} times; "
                                                  f"last: {error}.", counted=True)
                return
            job.attempts += 1
            self._set_attempts(key, job.attempts)     # before the try: one that kills the worker counts too
            self.meta[key] = (job.cid, job.batch_id, job.endpoint)
            try:
                results = list(self.engine.generate([job.request], cancelled=self._cancelled))
            except Exception as e:
                self.meta.pop(key, None)
                error = f"{type(e).__name__}: {e}"
                log.warning("request %d failed alone (attempt %d of %d): %s", key, job.attempts, MAX_ATTEMPTS, error)
                continue
            if results:
                self._write(results[0])
            elif self.stop.is_set():
                self._set_attempts(key, job.attempts - 1)   # dropped by the stop: not a try
            return                                          # written, or dropped and settled by _cancelled
        with self.lock:                                     # never ran: settle it; its chunk goes back
            if held is not None:
                held.outstanding -= 1
                self._maybe_release(job.cid)

    def _set_attempts(self, key: int, attempts: int) -> None:
        with self.sessions.begin() as s:
            s.execute(update(Request).where(Request.id == key, Request.status == "planned")
                      .values(attempts=attempts))
