"""The worker role: claim plan chunks, stream them through the engine in plan order, write each result once.

One engine stream spans consecutive chunks: while the tail of a chunk is still
decoding, the next chunk is already being admitted, so chunk boundaries never
drain the engine's running batch. A chunk is released once every request it
admitted has a result.

Results are written by a writer thread, many to a transaction, so the engine
never waits on the database. They are written with a guard on the request's
status, so a chunk re-run
after a crash (or by a second worker after a lost lease) never writes a
second result for a request: every custom_id comes out exactly once.
"""
from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
from dataclasses import dataclass
from typing import Iterator

import numpy as np
from sqlalchemy import bindparam, select, update
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


class _LiveBatches:
    """Which batches may still run; re-read at most once a second, so cancels land within about a second."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions, self.ids, self.live, self.checked = sessions, set(), set(), 0.0

    def watch(self, batch_ids: set[str]) -> None:
        if not batch_ids <= self.ids:
            self.ids |= batch_ids
            self.checked = 0.0

    def __contains__(self, batch_id: str) -> bool:
        if time.time() - self.checked > 1.0:
            with self.sessions() as s:
                self.live = set(s.scalars(select(Batch.id).where(
                    Batch.id.in_(self.ids), Batch.status == "in_progress", Batch.expires_at > time.time())))
            self.checked = time.time()
        return batch_id in self.live


@dataclass
class _Held:
    """A claimed chunk: how many admitted requests still lack a result, and whether all were admitted."""
    outstanding: int = 0
    fed: bool = False
    lost: bool = False


class WorkerService:
    def __init__(self, settings: Settings, engine: Engine, engine_kind: str) -> None:
        self.settings, self.engine = settings, engine
        upgrade(settings.db_url)
        self.sessions = make_sessionmaker(make_engine(settings.db_url))
        self.id = new_id("worker_")
        self.held: dict[int, _Held] = {}
        self.meta: dict[int, tuple[int, str, str]] = {}   # request id -> (chunk id, batch id, endpoint)
        self.live = _LiveBatches(self.sessions)
        self.lock = threading.Lock()            # guards held/outstanding between the engine and writer threads
        self.results: queue.Queue = queue.Queue()
        now = time.time()
        with self.sessions.begin() as s:
            s.add(Worker(id=self.id, model=engine.model_name, engine=engine_kind, host=socket.gethostname(),
                         kv_capacity_tokens=engine.kv_capacity_tokens(),
                         step_tokens=getattr(engine, "step_token_budget", lambda: None)(), pid=os.getpid(),
                         started_at=now, heartbeat_at=now))

    def run(self, stop: threading.Event | None = None) -> None:
        stop = stop or threading.Event()
        threading.Thread(target=self._heartbeat, args=(stop,), daemon=True, name="heartbeat").start()
        writer = threading.Thread(target=self._writer, daemon=True, name="writer")
        writer.start()
        log.info("worker %s serving %s", self.id, self.engine.model_name)
        while not stop.is_set():
            try:
                if not self._serve_stream(stop):
                    stop.wait(self.settings.poll_interval_s)
            except Exception:
                log.exception("engine stream failed")
                self.results.join()
                self._abandon()
        self.results.put(None)              # finish writing what the engine produced, then stop
        writer.join()

    def _serve_stream(self, stop: threading.Event) -> bool:
        """Run one engine stream over as many consecutive chunks as are ready; False if there were none."""
        t0, n, toks = time.time(), 0, 0
        results = self.engine.generate(self._feed(stop), cancelled=self._cancelled)
        for res in results:
            self._write(res)
            n, toks = n + 1, toks + res.prompt_tokens + res.completion_tokens
        if n:
            dt = time.time() - t0
            log.info("stream: %d request(s), %d tokens in %.1fs (%.0f tok/s)", n, toks, dt, toks / max(dt, 1e-9))
        return n > 0

    def _feed(self, stop: threading.Event) -> Iterator[GenRequest]:
        """Requests of chunk after chunk in plan order; ends when no chunk is ready (or on stop)."""
        while not stop.is_set():
            cid = claims.claim(self.sessions, self.id, self.engine.model_name, self.settings.lease_seconds)
            if cid is None:
                return
            held = self.held[cid] = _Held()
            with self.sessions() as s:
                rows = s.execute(select(Request.id, Request.batch_id, Request.body, Request.prompt_ids,
                                        Request.max_tokens, Batch.endpoint).join(Batch)
                                 .where(Request.chunk_id == cid, Request.status == "planned")
                                 .order_by(Request.position)).all()
            self.live.watch({r.batch_id for r in rows})
            for r in rows:
                if held.lost or stop.is_set():
                    break
                if r.batch_id not in self.live:
                    continue
                self.meta[r.id] = (cid, r.batch_id, r.endpoint)
                held.outstanding += 1
                yield GenRequest(key=r.id, input_ids=np.frombuffer(r.prompt_ids, dtype="<i4").tolist(),
                                 params=sampling_params(r.body, r.max_tokens))
            with self.lock:
                held.fed = True
                self._maybe_release(cid)

    def _cancelled(self, key: int) -> bool:
        """The engine asks this between steps: drop work whose batch was cancelled or expired.

        True means the engine drops the request without a result, so it is
        settled here, once.
        """
        meta = self.meta.get(key)
        if meta is None:
            return True
        cid, batch_id, _ = meta
        if batch_id in self.live and not self.held[cid].lost:
            return False
        del self.meta[key]
        with self.lock:
            self.held[cid].outstanding -= 1
            self._maybe_release(cid)
        return True

    def _write(self, res: GenResult) -> None:
        cid, _, endpoint = self.meta.pop(res.key)
        self.results.put((cid, res, response_body(endpoint, self.engine.model_name, res)))

    def _writer(self) -> None:
        """Write queued results, all that are waiting in one transaction, then settle their chunks."""
        stmt = (update(Request).where(Request.id == bindparam("b_id"), Request.status == "planned")
                .values(status="completed", response=bindparam("b_response"), completion_tokens=bindparam("b_out"),
                        cached_tokens=bindparam("b_cached"), finished_at=bindparam("b_at")))
        while True:
            items = [self.results.get()]
            while not self.results.empty() and len(items) < 256:
                items.append(self.results.get_nowait())
            done = [it for it in items if it is not None]
            try:
                if done:
                    with self.sessions.begin() as s:
                        s.connection().execute(stmt, [
                            {"b_id": r.key, "b_response": body, "b_out": r.completion_tokens,
                             "b_cached": r.cached_tokens, "b_at": time.time()} for _, r, body in done])
                    with self.lock:
                        for cid, _, _ in done:
                            self.held[cid].outstanding -= 1
                            self._maybe_release(cid)
            except Exception:
                log.exception("writing %d result(s) failed; their chunks will be re-run", len(done))
            finally:
                for _ in items:
                    self.results.task_done()
            if len(done) < len(items):
                return

    def _maybe_release(self, cid: int) -> None:
        """Release a chunk once it is fully fed and every admitted request settled (caller holds the lock)."""
        held = self.held[cid]
        if held.fed and held.outstanding <= 0:
            if not held.lost:
                claims.release(self.sessions, cid, self.id)
            del self.held[cid]

    def _abandon(self) -> None:
        """After an engine failure: hand held chunks back for a retry, or fail their requests after MAX_ATTEMPTS."""
        for cid in list(self.held):
            with self.sessions.begin() as s:
                chunk = s.get(Chunk, cid)
                if chunk is not None and chunk.attempts >= MAX_ATTEMPTS:
                    s.execute(update(Request).where(Request.chunk_id == cid, Request.status == "planned").values(
                        status="failed", finished_at=time.time(),
                        error={"code": "server_error", "message": "The engine failed on this request repeatedly."}))
                    chunk.status = "done"
                elif chunk is not None:
                    chunk.status, chunk.worker_id = "pending", None
        self.held.clear()
        self.meta.clear()

    def _heartbeat(self, stop: threading.Event) -> None:
        every = self.settings.lease_seconds / 3
        while not stop.wait(every):
            try:
                with self.sessions.begin() as s:
                    s.execute(update(Worker).where(Worker.id == self.id).values(heartbeat_at=time.time()))
                for cid, held in list(self.held.items()):
                    if not held.lost and not claims.renew(self.sessions, cid, self.id, self.settings.lease_seconds):
                        log.warning("lost the lease on chunk %d; dropping its unfinished work", cid)
                        held.lost = True
            except Exception:
                log.exception("heartbeat failed")
