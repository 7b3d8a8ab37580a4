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
from pathlib import Path

import numpy as np
from sqlalchemy import update

from blendserve.core.bell import Bell
from blendserve.core.config import Settings
from blendserve.core.db import make_sessionmaker, shared_engine
from blendserve.core.ids import new_id
from blendserve.core.models import Worker
from blendserve.migrations.upgrade import upgrade
from blendserve.protocol.grammar_limits import with_grammar
from blendserve.protocol.requests import stored
from blendserve.worker import writes
from blendserve.worker.engines.base import Engine, GenRequest, engine_fingerprint, engine_stats
from blendserve.worker.interactive import InteractiveServer
from blendserve.worker.lane import Lane, Share
from blendserve.worker.ledger import Ledger
from blendserve.worker.poison import PoisonRunner, Suspect
from blendserve.worker.ranks import WORK, idle_wait, shared, tokenizer_side
from blendserve.worker.sink import ResultSink

log = logging.getLogger("blendserve.worker")

PREFETCH_SHARE = 0.5    # the next chunk is claimed once this last share of a chunk is being admitted


class WorkerService:
    """One engine rank: its chunk ledger, its result sink and its poison-request runner, composed."""

    def __init__(self, settings: Settings, engine: Engine, engine_kind: str, model_path: Path | None = None,
                 rank: int = 0) -> None:
        """`model_path` (its tokenizer) enables the interactive endpoint; rank r of a process listens on
        BLENDSERVEWORKER_PORT + r (any free port when that is 0)."""
        self.settings, self.engine = settings, engine
        self.fingerprint = engine_fingerprint(engine)     # each result's system_fingerprint
        upgrade(settings.db_url, settings)
        self.sessions = make_sessionmaker(shared_engine(settings.db_url, settings.db_pool_size))
        self.id = new_id("worker_")
        self.stop = threading.Event()
        self.lane = Lane(settings.interactive_max_batch, settings.interactive_max_wait_ms / 1000, WORK)
        self.chunks_bell = Bell(settings.data_dir, "chunks")   # rung by the scheduler when a round wrote chunks
        self.share = Share()
        self.interactive = self._interactive_server(model_path, rank)
        live_and_claims = shared(self.sessions)
        self.live = live_and_claims[0]
        self.ledger = Ledger(self.sessions, self.id, engine.model_name, settings, live_and_claims, rank,
                             lambda: self.stop.is_set())
        self.sink = ResultSink(self.id, engine.model_name, self.fingerprint, writes.shared(self.sessions),
                               self.ledger, self.share, self.interactive)
        self.poison = PoisonRunner(self.sessions, engine, self.ledger, self.sink, self.live,
                                   lambda: self.stop.is_set(), lambda key: self._cancelled(key), self.interactive)
        self._register(engine, engine_kind)

    def _register(self, engine: Engine, engine_kind: str) -> None:
        """This rank's row: what the planner and the dashboard read of it."""
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
        return InteractiveServer(self.lane, with_grammar(info, st.grammar), tokenizer, self.engine.model_name,
                                 st.worker_host, port, self.fingerprint, st.worker_secret)

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
                self.poison.after_failure(self._give_back_all)
                self.poison.run_calls()         # its interactive calls first: their callers wait
                continue
            try:
                busy = self.poison.run() or busy
            except Exception:
                log.exception("running suspect requests failed")
                self._give_back_all()
            idle = 0 if busy else idle + 1
            if not busy:
                self._idle(idle_wait(self.settings.poll_interval_s, idle))
        if self.interactive is not None:
            self.interactive.close()
        self._shut_down()
        self.ledger.close()
        log.info("worker %s stopped; unfinished work handed back", self.id)

    def _idle(self, seconds: float) -> None:
        """Wait up to `seconds`, less if this process claimed work meanwhile, a planning round wrote chunks,
        an interactive request arrived or its group falls due (the lane shares WORK), or the worker is stopping."""
        deadline = time.monotonic() + seconds
        with WORK:
            while not self.stop.is_set() and (left := deadline - time.monotonic()) > 0:
                due = self.lane.due_in()
                if self.chunks_bell.rang():
                    self.ledger.claims.wake()
                    return
                if due == 0.0 or WORK.wait(min(left, 0.05, due if due is not None else left)):
                    return

    # -- the engine stream -------------------------------------------------------------------

    def _serve_stream(self) -> bool:
        """Run one engine stream over as many consecutive chunks as are ready; False if there were none."""
        t0, n, toks, served = time.time(), 0, 0, False
        for res in self.engine.generate(self._feed(), cancelled=self._cancelled, urgent=self.lane.take,
                                        cancel_epoch=self._cancel_epoch):
            self.sink.write(res)
            served = True
            if res.key > 0:                     # batch work; interactive calls are not logged one by one
                n, toks = n + 1, toks + res.prompt_tokens + res.completion_tokens
        if n:
            dt = time.time() - t0
            log.info("stream: %d request(s), %d tokens in %.1fs (%.0f tok/s)", n, toks, dt, toks / max(dt, 1e-9))
        return served

    def _feed(self) -> Iterator[GenRequest | None]:
        """Requests of chunk after chunk in plan order; None when no chunk is ready (the engine's stream ends
        there if it is idle; if interactive work keeps it busy, it asks again at its next admission, so
        batch work is never shut out for as long as calls keep coming); ends on stop, or when suspects wait to
        run alone. Database errors end the stream, never fail the engine's requests.

        The next chunk is claimed ahead, in the rank's claim thread, once the last PREFETCH_SHARE of a
        chunk is being admitted, so the engine's loop (which pulls from this generator between steps)
        does not stop for a claim's transaction at every chunk boundary."""
        while not self.stop.is_set() and not self.poison.suspects:
            try:
                t0 = time.perf_counter()
                got = self.ledger.next_claim()
                if got is None:
                    if self.chunks_bell.rang():      # a round wrote chunks: the next ask claims at once
                        self.ledger.claims.wake()
                    yield None
                    continue
                log.info("chunk %d: the engine waited %.1f ms for it", got.id, (time.perf_counter() - t0) * 1e3)
            except Exception:
                log.exception("claiming a chunk failed; trying again shortly")
                return
            cid, rows = got
            ahead_at = len(rows) - max(1, int(len(rows) * PREFETCH_SHARE))
            for i, r in enumerate(rows):
                if self.ledger.lost(cid) or self.stop.is_set():
                    break
                if i >= ahead_at:
                    self.ledger.claim_ahead()
                if r.batch_id in self.live and (req := self._request(cid, r)) is not None:
                    yield req
            self.ledger.fed(cid)

    def _request(self, cid: int, r) -> GenRequest | None:
        """The engine's request for a claimed row; None where it does not go to the engine now (its
        parameters fail it alone, or it ended a stream before and runs alone)."""
        try:
            request = stored(r.endpoint, r.body)        # the typed body its row stored (the rules ran at intake)
            req = GenRequest(key=r.id, input_ids=np.frombuffer(r.prompt_ids, dtype="<i4").tolist(),
                             params=request.sampling_params(r.max_tokens))
        except Exception as e:      # the request alone is bad: its own error line
            self.sink.failed(cid, r.id, f"The request's parameters could not be applied: {e}")
            return None
        self.ledger.owe(cid)
        self.sink.expect(r.id, request)     # its answer echoes the request (its tool call, its settings)
        if r.attempts > 0:
            self.poison.suspects.append(Suspect(cid, req, r.batch_id, r.endpoint, r.attempts))
            return None
        self.ledger.run(r.id, cid, r.batch_id, r.endpoint)
        return req

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
        meta = self.ledger.meta.get(key)
        if meta is None:
            return True
        cid, batch_id, _ = meta
        if batch_id in self.live and not self.ledger.lost(cid) and not self.stop.is_set():
            return False
        self.ledger.drop(key)
        self.sink.forget(key)
        return True

    def _cancel_epoch(self) -> int:
        """The engine's cancel epoch (Engine.generate): it moves whenever `_cancelled` may have turned true
        for a request the engine runs: a batch left the live set (cancelled or expired; re-read here once a
        second, as the per-request checks did), a claim was lost, the worker is stopping, or an
        interactive caller left. A sum of counters that only grow, so any one moving moves it.

        A request whose batch had already left the live set, or whose chunk was already lost, when it was
        admitted would be missed; `_feed` admits neither (it runs in the engine's thread, before the step)."""
        return self.live.fresh() + self.ledger.losses + self.lane.cancels + self.stop.is_set()

    # -- stop and heartbeat --------------------------------------------------------------------------

    def _give_back_all(self) -> None:
        self.ledger.give_back_all()
        self.sink.clear()
        self.poison.suspects.clear()

    def _shut_down(self) -> None:
        """Clean stop: write what the engine produced, then hand back every chunk still held."""
        self.sink.drain()
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
                self.ledger.renew()
            except Exception:
                log.exception("heartbeat failed")
