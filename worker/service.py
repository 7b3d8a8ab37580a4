"""The worker role: claim a plan chunk, stream it through the engine in plan order, write each result once.

Results are written with a guard on the request's status, so a chunk re-run
after a crash (or by a second worker after a lost lease) never writes a
second result for a request: every custom_id comes out exactly once.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Iterator

import numpy as np
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from core.config import Settings
from core.db import make_engine, make_sessionmaker
from core.ids import new_id
from core.migrate import upgrade
from core.models import Batch, Chunk, Request, Worker
from worker import claims
from worker.engines.base import Engine, GenRequest, GenResult
from worker.responses import response_body, sampling_params

log = logging.getLogger("blendserve.worker")

MAX_ATTEMPTS = 3
LIVE_BATCH = "in_progress"


class _LiveBatches:
    """Which batches may still run; refreshed at most once a second so cancels land between admissions."""

    def __init__(self, sessions: sessionmaker[Session], batch_ids: set[str]) -> None:
        self.sessions, self.batch_ids, self.checked, self.live = sessions, batch_ids, 0.0, set(batch_ids)

    def __contains__(self, batch_id: str) -> bool:
        if time.time() - self.checked > 1.0:
            with self.sessions() as s:
                self.live = set(s.scalars(select(Batch.id).where(
                    Batch.id.in_(self.batch_ids), Batch.status == LIVE_BATCH, Batch.expires_at > time.time())))
            self.checked = time.time()
        return batch_id in self.live

    def any(self) -> bool:
        return any(b in self for b in self.batch_ids)


class WorkerService:
    def __init__(self, settings: Settings, engine: Engine, engine_kind: str) -> None:
        self.settings, self.engine = settings, engine
        upgrade(settings.db_url)
        self.sessions = make_sessionmaker(make_engine(settings.db_url))
        self.id = new_id("worker_")
        self.chunk: int | None = None
        self.lost = threading.Event()
        now = time.time()
        with self.sessions.begin() as s:
            s.add(Worker(id=self.id, model=engine.model_name, engine=engine_kind, host=socket.gethostname(),
                         kv_capacity_tokens=engine.kv_capacity_tokens(), pid=os.getpid(), started_at=now,
                         heartbeat_at=now))

    def run(self, stop: threading.Event | None = None) -> None:
        stop = stop or threading.Event()
        beat = threading.Thread(target=self._heartbeat, args=(stop,), daemon=True, name="heartbeat")
        beat.start()
        log.info("worker %s serving %s", self.id, self.engine.model_name)
        while not stop.is_set():
            try:
                cid = claims.claim(self.sessions, self.id, self.engine.model_name, self.settings.lease_seconds)
            except Exception:
                log.exception("claim failed; retrying")
                cid = None
            if cid is None:
                stop.wait(self.settings.poll_interval_s)
                continue
            self.chunk = cid
            self.lost.clear()
            try:
                self.run_chunk(cid)
            except Exception:
                log.exception("chunk %d failed", cid)
                self._fail_if_exhausted(cid)
            finally:
                self.chunk = None

    def run_chunk(self, chunk_id: int) -> None:
        with self.sessions() as s:
            rows = s.execute(select(Request.id, Request.batch_id, Request.body, Request.prompt_ids,
                                    Request.max_tokens, Batch.endpoint).join(Batch)
                             .where(Request.chunk_id == chunk_id, Request.status == "planned")
                             .order_by(Request.position)).all()
        endpoints = {r.id: r.endpoint for r in rows}
        live = _LiveBatches(self.sessions, {r.batch_id for r in rows})
        t0, n, toks = time.time(), 0, 0
        results = self.engine.generate(self._stream(rows, live))
        for res in results:
            self._write(res, endpoints[res.key])
            n, toks = n + 1, toks + res.prompt_tokens + res.completion_tokens
            if not live.any():
                results.close()     # every batch here was cancelled or expired: stop the work in flight
                break
        if not self.lost.is_set():
            claims.release(self.sessions, chunk_id, self.id)
        dt = time.time() - t0
        log.info("chunk %d: %d request(s), %d tokens in %.1fs (%.0f tok/s)", chunk_id, n, toks, dt, toks / max(dt, 1e-9))

    def _stream(self, rows, live: _LiveBatches) -> Iterator[GenRequest]:
        for r in rows:
            if self.lost.is_set():
                return
            if r.batch_id not in live:
                continue
            ids = np.frombuffer(r.prompt_ids, dtype="<i4").tolist()
            yield GenRequest(key=r.id, input_ids=ids, params=sampling_params(r.body, r.max_tokens))

    def _write(self, res: GenResult, endpoint: str) -> None:
        body = response_body(endpoint, self.engine.model_name, res)
        with self.sessions.begin() as s:
            s.execute(update(Request).where(Request.id == res.key, Request.status == "planned").values(
                status="completed", response=body, completion_tokens=res.completion_tokens,
                cached_tokens=res.cached_tokens, finished_at=time.time()))

    def _fail_if_exhausted(self, chunk_id: int) -> None:
        """A chunk that broke the engine MAX_ATTEMPTS times fails its remaining requests instead of looping."""
        with self.sessions.begin() as s:
            chunk = s.get(Chunk, chunk_id)
            if chunk is None or chunk.attempts < MAX_ATTEMPTS:
                return
            s.execute(update(Request).where(Request.chunk_id == chunk_id, Request.status == "planned").values(
                status="failed", finished_at=time.time(),
                error={"code": "server_error", "message": "The engine failed on this request repeatedly."}))
            chunk.status = "done"

    def _heartbeat(self, stop: threading.Event) -> None:
        every = self.settings.lease_seconds / 3
        while not stop.wait(every):
            try:
                with self.sessions.begin() as s:
                    s.execute(update(Worker).where(Worker.id == self.id).values(heartbeat_at=time.time()))
                cid = self.chunk
                if cid is not None and not claims.renew(self.sessions, cid, self.id, self.settings.lease_seconds):
                    log.warning("lost the lease on chunk %d; stopping it", cid)
                    self.lost.set()
            except Exception:
                log.exception("heartbeat failed")
