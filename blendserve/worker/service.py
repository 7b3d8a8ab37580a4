"""The worker role: claim plan chunks, stream them through the engine in plan order, write each result once.

One engine stream spans consecutive chunks: while the tail of a chunk is still
decoding, the next chunk is already being admitted, so chunk boundaries never
drain the engine's running batch; the next chunk is claimed ahead, in the
rank's claim thread, while the current one's second half is admitted, so the
engine's loop does not wait for a claim's transaction at every boundary (at 64
echo ranks on 2 cores a claim took 70 ms at the median, 0.7 s at p99; on a GPU
that is a stalled forward loop). A chunk is released once every request it
admitted has a result; one that still holds requests to run (a stop, a lost
batch) goes back to `pending` rather than `done` (blendserve/worker/claims.py).

Results are written by the process's writer thread (blendserve/worker/writes.py), the
results of all its ranks many to a transaction, so the engine never waits on
the database. They are written with a guard on the request's status, so a
chunk re-run after a crash (or by a second worker after a lost lease) never
writes a second result for a request: every custom_id comes out exactly once.
A write that fails is retried; if it keeps failing, its chunks go back to
`pending` and run again.

Ranks of one process (echo load tests) share what they can: the writer, the
live-batch check, and their empty claims: while one rank's claim just found
nothing, its idle siblings do not ask the database again (see blendserve/worker/ranks.py).

Poison requests: when a stream raises, every request it was running gets one
attempt counted (`requests.attempts`) and its chunks go back to `pending`.
A request with attempts runs alone, in a stream of its own, its attempt
counted before it starts (so a try that kills the process counts too); at
MAX_ATTEMPTS it fails with its own error line. Its neighbours, its batch and
every other batch carry on.

A clean stop (SIGTERM/SIGINT): no new request is admitted, requests in flight
are dropped (they run again later, from the start), the results already
produced are written, and every held chunk goes back to `pending`, its claim
not counted as a try. The worker exits within a couple of seconds.

Interactive requests (blendserve/worker/interactive.py) come in over the worker's own
HTTP port, wait in the lane (blendserve/worker/lane.py) for the N_max / T_max rule, and
are handed to the engine before every step (`urgent`), ahead of batch work.
Their results go back to their callers, never to the job table; a stop ends
them with an error the API can retry elsewhere.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sqlalchemy import update

from blendserve.core.config import Settings
from blendserve.core.db import make_sessionmaker, shared_engine
from blendserve.core.ids import new_id
from blendserve.core.models import Worker
from blendserve.migrations.upgrade import upgrade
from blendserve.protocol import responses_api
from blendserve.protocol.structured import ToolCall
from blendserve.worker import api_results, claims, writes
from blendserve.worker.engines.base import Engine, GenRequest, GenResult, engine_fingerprint, engine_stats
from blendserve.worker.interactive import InteractiveServer
from blendserve.worker.lane import Lane, Share
from blendserve.worker.poison import PoisonRequests, Suspect
from blendserve.worker.ranks import WORK, idle_wait, shared, tokenizer_side
from blendserve.worker.responses import response_body, sampling_params, tool_call

log = logging.getLogger("blendserve.worker")

PREFETCH_SHARE = 0.5    # the next chunk is claimed once this last share of a chunk is being admitted

@dataclass
class _Held:
    """A claimed chunk: how many admitted requests still lack a result, and whether all were admitted."""
    outstanding: int = 0
    fed: bool = False
    lost: bool = False


class WorkerService(PoisonRequests):
    def __init__(self, settings: Settings, engine: Engine, engine_kind: str, model_path: Path | None = None,
                 rank: int = 0) -> None:
        """`model_path` (its tokenizer) enables the interactive endpoint; rank r of a process listens on
        BLENDSERVEWORKER_PORT + r (any free port when that is 0)."""
        self.settings, self.engine = settings, engine
        self.fingerprint = engine_fingerprint(engine)     # each result's system_fingerprint
        upgrade(settings.db_url, settings)
        self.sessions = make_sessionmaker(shared_engine(settings.db_url, settings.db_pool_size))
        self.id = new_id("worker_")
        self.held: dict[int, _Held] = {}
        self.meta: dict[int, tuple[int, str, str]] = {}   # request id -> (chunk id, batch id, endpoint)
        self.bodies: dict[int, dict] = {}       # request id -> its body, where the result echoes it (api_results)
        self.tools: dict[int, ToolCall] = {}     # request id -> its forced tool call (the answer's shape)
        self.suspects: list[Suspect] = []
        self.live, self.claims = shared(self.sessions)
        self.writer = writes.shared(self.sessions)
        self.lock = threading.Lock()            # guards held/outstanding between the engine and writer threads
        self.losses = 0                         # claims lost, meta dropped: part of the engine's cancel epoch
        self.claimer = ThreadPoolExecutor(1, thread_name_prefix=f"claims{rank}")    # claims ahead (_feed)
        self.ahead: Future[claims.Claimed | None] | None = None
        self.stop = threading.Event()
        self.lane = Lane(settings.interactive_max_batch, settings.interactive_max_wait_ms / 1000, WORK)
        self.share = Share()
        self.interactive = self._interactive_server(model_path, rank)
        now = time.time()
        with self.sessions.begin() as s:
            s.add(Worker(id=self.id, model=engine.model_name, engine=engine_kind, host=socket.gethostname(),
                         kv_capacity_tokens=engine.kv_capacity_tokens(),
                         step_tokens=getattr(engine, "step_token_budget", lambda: None)(),
                         hardware=getattr(engine, "hardware", lambda: None)(), pid=os.getpid(),
                         started_at=now, heartbeat_at=now, interactive_url=self._url()))

    def _interactive_server(self, model_path: Path | None, rank: int) -> InteractiveServer | None:
        st = self.settings
        if not st.interactive or model_path is None:
            return None
        port = st.worker_port + rank if st.worker_port else 0
        info, tokenizer = tokenizer_side(self.engine.model_name, model_path)
        return InteractiveServer(self.lane, info, tokenizer, self.engine.model_name, st.worker_host, port,
                                 self.fingerprint, st.worker_secret)

    def _url(self) -> str | None:
        if self.interactive is None:
            return None
        host = self.settings.worker_advertise_host or self.settings.worker_host
        return f"http://{socket.gethostname() if host in ('', '0.0.0.0', '::') else host}:{self.interactive.port}"

    def run(self, stop: threading.Event | None = None) -> None:
        self.stop = stop or threading.Event()
        threading.Thread(target=self._heartbeat, daemon=True, name="heartbeat").start()
        if self.interactive is not None:
            self.interactive.start()
        log.info("worker %s serving %s%s", self.id, self.engine.model_name,
                 f"; interactive requests at {self._url()}" if self.interactive else "")
        idle = 0
        while not self.stop.is_set():
            try:
                busy = self._serve_stream()
            except Exception:
                log.exception("engine stream failed; the requests it was running will run alone")
                self._after_stream_failure()
                continue
            try:
                busy = self._run_suspects() or busy
            except Exception:
                log.exception("running suspect requests failed")
                self._give_back_all()
            idle = 0 if busy else idle + 1
            if not busy:
                self._idle(idle_wait(self.settings.poll_interval_s, idle))
        if self.interactive is not None:
            self.interactive.close()
        self._shut_down()
        self.claimer.shutdown()
        log.info("worker %s stopped; unfinished work handed back", self.id)

    def _idle(self, seconds: float) -> None:
        """Wait up to `seconds`, less if this process claimed work meanwhile, an interactive request
        arrived or its group falls due (the lane shares WORK), or the worker is stopping."""
        deadline = time.monotonic() + seconds
        with WORK:
            while not self.stop.is_set() and (left := deadline - time.monotonic()) > 0:
                due = self.lane.due_in()
                if due == 0.0 or WORK.wait(min(left, 0.1, due if due is not None else left)):
                    return

    # -- the engine stream -------------------------------------------------------------------

    def _serve_stream(self) -> bool:
        """Run one engine stream over as many consecutive chunks as are ready; False if there were none."""
        t0, n, toks, served = time.time(), 0, 0, False
        for res in self.engine.generate(self._feed(), cancelled=self._cancelled, urgent=self.lane.take,
                                        cancel_epoch=self._cancel_epoch):
            self._write(res)
            served = True
            if res.key > 0:                     # batch work; interactive calls are not logged one by one
                n, toks = n + 1, toks + res.prompt_tokens + res.completion_tokens
        if n:
            dt = time.time() - t0
            log.info("stream: %d request(s), %d tokens in %.1fs (%.0f tok/s)", n, toks, dt, toks / max(dt, 1e-9))
        return served

    def _feed(self) -> Iterator[GenRequest]:
        """Requests of chunk after chunk in plan order; ends when no chunk is ready, on stop, or when
        suspects wait to run alone. Database errors end the stream, never fail the engine's requests.

        The next chunk is claimed ahead, in the rank's claim thread, once the last PREFETCH_SHARE of a
        chunk is being admitted, so the engine's loop (which pulls from this generator between steps)
        does not stop for a claim's transaction at every chunk boundary."""
        while not self.stop.is_set() and not self.suspects:
            try:
                t0 = time.perf_counter()
                got = self._next_claim()
                if got is None:
                    return
                log.info("chunk %d: the engine waited %.1f ms for it", got.id, (time.perf_counter() - t0) * 1e3)
            except Exception:
                log.exception("claiming a chunk failed; trying again shortly")
                return
            cid, rows = got
            held = self.held[cid]
            ahead_at = len(rows) - max(1, int(len(rows) * PREFETCH_SHARE))
            for i, r in enumerate(rows):
                if held.lost or self.stop.is_set():
                    break
                if i >= ahead_at and self.ahead is None:
                    self.ahead = self.claimer.submit(self._claim)
                if r.batch_id not in self.live:
                    continue
                try:
                    # A Responses body samples as the chat it translates to (text.format: response_format).
                    body = responses_api.chat_params(r.body) if r.endpoint == responses_api.ENDPOINT else r.body
                    req = GenRequest(key=r.id, input_ids=np.frombuffer(r.prompt_ids, dtype="<i4").tolist(),
                                     params=sampling_params(body, r.max_tokens))
                    if r.endpoint not in api_results.ENDPOINTS and (tool := tool_call(body)) is not None:
                        self.tools[r.id] = tool
                except Exception as e:      # the request alone is bad: its own error line
                    self._settle_failed(cid, r.id, f"The request's parameters could not be applied: {e}")
                    continue
                with self.lock:
                    held.outstanding += 1
                if r.endpoint in api_results.ENDPOINTS:     # their bodies echo the request's settings
                    self.bodies[r.id] = r.body
                if r.attempts > 0:
                    self.suspects.append(Suspect(cid, req, r.batch_id, r.endpoint, r.attempts))
                    continue
                self.meta[r.id] = (cid, r.batch_id, r.endpoint)
                yield req
            with self.lock:
                held.fed = True
                self._maybe_release(cid)

    def _claim(self) -> claims.Claimed | None:
        """Claim the next chunk and hold it (the heartbeat renews its lease from here on); None if none is
        ready. Runs in the rank's claim thread (ahead of need) or in the engine's (a stream's first)."""
        t0 = time.perf_counter()
        got = self.claims.claim(self.sessions, self.id, self.engine.model_name, self.settings.lease_seconds,
                                self.settings.poll_interval_s)
        if got is None:
            return None
        with self.lock:
            self.held[got.id] = _Held()
        with WORK:
            WORK.notify_all()
        log.info("claimed chunk %d (%d requests) in %.1f ms (sibling wait %.1f, transaction %.1f, "
                 "its CPU %.1f)", got.id, len(got.rows), (time.perf_counter() - t0) * 1e3, *self.claims.timing())
        self.live.watch({r.batch_id for r in got.rows})
        return got

    def _next_claim(self) -> claims.Claimed | None:
        """The chunk claimed ahead, if there is one; else (none was ready then either) a claim now."""
        ahead, self.ahead = self.ahead, None
        got = ahead.result() if ahead is not None else None
        if ahead is not None and got is None:       # planning (or the batch) had nothing ready in time
            log.info("the claim made ahead found no chunk ready")
        return got if got is not None else self._claim()

    def _forget_ahead(self) -> None:
        """Wait for a claim made ahead to end; its chunk, if it got one, is held and is handed back with
        the others (_give_back_all)."""
        ahead, self.ahead = self.ahead, None
        if ahead is not None:
            try:
                ahead.result()
            except Exception:
                log.exception("claiming a chunk ahead failed")

    def _cancelled(self, key: int) -> bool:
        """The engine asks this between steps: drop work whose batch was cancelled or expired, whose
        claim was lost, or all of it on stop.

        True means the engine drops the request without a result, so it is
        settled here, once. An interactive request (negative key) is dropped when its caller left,
        or on stop (its caller is told).
        """
        if key < 0:
            if self.stop.is_set() and self.interactive is not None:
                self.interactive.abort(key, "The worker is stopping.")
            return self.stop.is_set() or self.lane.cancelled(key)
        meta = self.meta.get(key)
        if meta is None:
            return True
        cid, batch_id, _ = meta
        if batch_id in self.live and not self.held[cid].lost and not self.stop.is_set():
            return False
        del self.meta[key]
        self.bodies.pop(key, None)
        with self.lock:
            self.held[cid].outstanding -= 1
            self._maybe_release(cid)
        return True

    def _cancel_epoch(self) -> int:
        """The engine's cancel epoch (Engine.generate): it moves whenever `_cancelled` may have turned true
        for a request the engine runs: a batch left the live set (cancelled or expired; re-read here once a
        second, as the per-request checks did), a claim was lost, the worker is stopping, or an
        interactive caller left. A sum of counters that only grow, so any one moving moves it.

        A request whose batch had already left the live set, or whose chunk was already lost, when it was
        admitted would be missed; `_feed` admits neither (it runs in the engine's thread, before the step)."""
        return self.live.fresh() + self.losses + self.lane.cancels + self.stop.is_set()

    # -- results ---------------------------------------------------------------------------------

    def _write(self, res: GenResult) -> None:
        if res.error is not None:       # refused by the engine: this request fails alone, the stream runs on
            if res.key < 0:
                if self.interactive is not None:
                    self.interactive.abort(res.key, res.error)
            elif (meta := self.meta.pop(res.key, None)) is not None:
                self._settle_failed(meta[0], res.key, res.error, counted=True)
            return
        self.share.add(res.prompt_tokens + res.completion_tokens, interactive=res.key < 0)
        if res.key < 0:
            if self.interactive is not None:
                self.interactive.finish(res)
            return
        cid, _, endpoint = self.meta.pop(res.key)
        self.writer.put(self.id, {"b_id": res.key, "b_status": "completed",
                                  "b_response": self._response(endpoint, res),
                                  "b_error": None, "b_out": res.completion_tokens, "b_cached": res.cached_tokens},
                        lambda: self._settled(cid))

    def _response(self, endpoint: str, res: GenResult) -> dict:
        res.fingerprint = res.fingerprint or self.fingerprint
        if endpoint in api_results.ENDPOINTS:
            return api_results.result_body(endpoint, self.engine.model_name, res, self.bodies.pop(res.key, {}))
        return response_body(endpoint, self.engine.model_name, res, self.tools.pop(res.key, None))

    def _settle_failed(self, cid: int, key: int, message: str, counted: bool = False) -> None:
        """The request fails alone, with its own error line (written in order with the results)."""
        if not counted:
            with self.lock:
                self.held[cid].outstanding += 1
        log.warning("request %d failed: %s", key, message)
        self.writer.put(self.id, {"b_id": key, "b_status": "failed", "b_response": None,
                                  "b_error": {"code": "server_error", "message": message}, "b_out": 0, "b_cached": 0},
                        lambda: self._settled(cid))

    def _settled(self, cid: int) -> None:
        """A result of the chunk was written (or given up on): release the chunk once it has them all."""
        with self.lock:
            if (held := self.held.get(cid)) is not None:
                held.outstanding -= 1
                self._maybe_release(cid)

    # -- chunks ------------------------------------------------------------------------------------

    def _maybe_release(self, cid: int) -> None:
        """Release a chunk once it is fully fed and every admitted request settled (caller holds the lock)."""
        held = self.held.get(cid)
        if held is not None and held.fed and held.outstanding <= 0:
            self._give_back(cid, undo_claim=self.stop.is_set())

    def _give_back(self, cid: int, undo_claim: bool = True) -> None:
        """Drop the chunk; the database says done or pending (caller holds the lock)."""
        held = self.held.pop(cid)
        if held.lost:
            return
        try:
            claims.release(self.sessions, cid, self.id, undo_claim=undo_claim)
        except Exception:
            log.exception("could not release chunk %d; it runs again once its lease lapses", cid)

    def _give_back_all(self) -> None:
        self._forget_ahead()
        with self.lock:
            for cid in list(self.held):
                self._give_back(cid)
        self.meta.clear()
        self.bodies.clear()
        with self.lock:
            self.losses += 1
        self.suspects.clear()

    def _shut_down(self) -> None:
        """Clean stop: write what the engine produced, then hand back every chunk still held."""
        self.writer.drain(self.id)
        self._give_back_all()

    def _heartbeat(self) -> None:
        every = self.settings.lease_seconds / 3
        while not self.stop.wait(every):
            try:
                load = engine_stats(self.engine)     # pushed, so one scrape of the API sees every worker
                with self.sessions.begin() as s:
                    s.execute(update(Worker).where(Worker.id == self.id).values(
                        heartbeat_at=time.time(), running_sequences=load.running_sequences,
                        kv_used_tokens=load.kv_used_tokens, interactive_share=self.share.value()))
                for cid, held in list(self.held.items()):
                    if not held.lost and not claims.renew(self.sessions, cid, self.id, self.settings.lease_seconds):
                        log.warning("lost the lease on chunk %d; dropping its unfinished work", cid)
                        held.lost = True
                        with self.lock:         # after the flag: an engine that sees the new epoch sees it
                            self.losses += 1
            except Exception:
                log.exception("heartbeat failed")
