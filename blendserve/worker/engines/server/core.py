"""One stream in front of a running server as the driver's adapter (blendserve/worker/engines/driver.py).

What only this engine knows stays here: the window (prompt + max_tokens in flight up to `in_flight_kv`
KV capacities, at most `max_in_flight` batch requests), the requests a lost server handed back (sent
again first, in plan order, once `/health` answers), the health probes, and the hand-back of a failure
that may be a request's own (a 500: nothing new is sent, the rest finish, then the stream raises so the
worker counts an attempt for that request alone). See engine.py for why each holds. A request whose
caller's token callback raised fails alone at once (docs/design.md §12.1): it says nothing about the
server, so it is neither held for a lost server nor counted as a 500.
"""
from __future__ import annotations

import asyncio
import dataclasses
import heapq
import logging
import queue
import time
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

from blendserve.worker.engines.base import GenRequest, GenResult
from blendserve.worker.engines.driver import Feed, failure
from blendserve.worker.engines.server.calls import Refused, Rejected, Unavailable
from blendserve.worker.engines.server.discovery import known


class CallingEngine(Protocol):
    """What the adapter uses of the server engine (blendserve/worker/engines/server/engine.py): its event loop,
    one call, the server's state and its settings, named here so the engine module imports the adapter and
    not the other way round."""
    loop: asyncio.AbstractEventLoop
    settings: Any
    _flight: dict
    _up: bool
    _probe_at: float
    _order: Any

    async def _one(self, request: GenRequest, streamed: dict[int, dict[int, int]], seq: int) -> GenResult: ...

log = logging.getLogger("blendserve.worker.server")

FIRST_PROBE_S = 0.5             # the back-off's first wait, doubling up to retry_max_s


class OwnFailure(Exception):
    """A request's own callback raised: not a ValueError or a transport error, so the call's readers never
    take it for the server's fault (an unreadable answer, a lost connection)."""


def guarded(request: GenRequest) -> GenRequest:
    """The request with its `on_tokens` raising OwnFailure for whatever the caller's callback raises."""
    own = request.on_tokens
    if own is None:
        return request

    def on_tokens(*args: Any, **kwargs: Any) -> None:
        try:
            own(*args, **kwargs)
        except Exception as e:
            raise OwnFailure(f"{type(e).__name__}: {e}") from e

    return dataclasses.replace(request, on_tokens=on_tokens)


@dataclass
class _Flight:
    request: GenRequest
    seq: int                        # plan order: the order requests were taken from the stream
    cost: int                       # prompt + max_tokens, counted against the window (0: interactive)
    future: Future


class ServerCore:
    """The requests of one stream on their way to the server, in flight or handed back."""

    sweep_s = 0.2
    pulls = False

    def __init__(self, engine: CallingEngine, interactive: bool) -> None:
        self.engine = engine
        self.flight: dict[int, _Flight] = {}
        engine._flight = self.flight
        self.done: queue.Queue[tuple[int, Future]] = queue.Queue()
        self.again: list[tuple[int, int, GenRequest]] = []   # (seq, key, request) handed back by a lost server
        self.streamed: dict[int, dict[int, int]] = {}        # interactive key -> choice -> tokens its caller has
        self.used = self.batch_in_flight = 0
        self.rejected: BaseException | None = None
        self.probe: Future | None = None
        self.interactive = interactive
        if engine._up:
            engine._probe_at = time.monotonic() + engine.settings.health_interval_s

    # -- the driver's questions ----------------------------------------------------------------------

    def room(self) -> bool:
        """New batch requests only while the server answers, nothing handed back waits, and none failed."""
        return self.engine._up and not self.again and self.rejected is None

    def fits(self, request: GenRequest) -> bool:
        cost = len(request.input_ids) + request.params.max_tokens
        e = self.engine
        return self.batch_in_flight == 0 or (self.used + cost <= e.settings.in_flight_kv * e.kv_capacity_tokens()
                                             and self.batch_in_flight < e.max_in_flight())

    def add(self, request: GenRequest, urgent: bool) -> None:
        if not urgent:
            self._send(request, next(self.engine._order))
            return
        seq = -next(self.engine._order) - 1            # ahead of every batch request if handed back
        if self.engine._up:
            self._send(request, seq)
        else:
            heapq.heappush(self.again, (seq, request.key, request))

    def abort(self, keys: list[int]) -> None:
        gone = set(keys)
        for key in gone & self.flight.keys():
            self._land(key).future.cancel()       # closes the connection: the server aborts it
        if self.again:
            self.again = [a for a in self.again if a[1] not in gone]
            heapq.heapify(self.again)

    def busy(self) -> bool:
        """Requests in flight or handed back; or a server that is down with a probe out (it may answer)."""
        return bool(self.flight or self.again) or (self.probe is not None and not self.engine._up)

    def step(self, feed: Feed) -> Iterator[GenResult]:
        if self.engine._up:
            self._resend()
        self._check_health()
        try:
            events = [self.done.get(timeout=0.01 if self.interactive or not self.engine._up else 0.1)]
        except queue.Empty:
            events = []
        while not self.done.empty():
            events.append(self.done.get_nowait())
        for key, fut in events:
            f = self.flight.get(key)
            if f is None or f.future is not fut:
                continue                            # cancelled, or handed back and sent again
            self._land(key)
            if (result := self._landed(f, fut)) is not None:
                yield result
        if self.rejected is not None and not self.flight and not self.again:
            raise self.rejected if isinstance(self.rejected, Rejected) else Rejected(str(self.rejected))

    def close(self) -> None:
        """A stream ended early (an error, the worker stopping) leaves nothing running."""
        for f in self.flight.values():
            f.future.cancel()
        if self.probe is not None:
            self.probe.cancel()

    # -- the window ----------------------------------------------------------------------------------

    def _send(self, request: GenRequest, seq: int) -> None:
        cost = 0 if request.on_tokens is not None or request.key < 0 else \
            len(request.input_ids) + request.params.max_tokens
        fut = asyncio.run_coroutine_threadsafe(self.engine._one(guarded(request), self.streamed, seq),
                                               self.engine.loop)
        self.flight[request.key] = _Flight(request, seq, cost, fut)
        self.used += cost
        self.batch_in_flight += cost > 0
        fut.add_done_callback(lambda f, key=request.key: self.done.put((key, f)))

    def _land(self, key: int) -> _Flight:
        f = self.flight.pop(key)
        self.used -= f.cost
        self.batch_in_flight -= f.cost > 0
        return f

    def _resend(self) -> None:
        """What a lost server handed back goes first, interactive requests at once, batch ones as they fit."""
        while self.again and (self.again[0][0] < 0 or self.fits(self.again[0][2])):
            seq, _, request = heapq.heappop(self.again)
            self._send(request, seq)

    def _landed(self, f: _Flight, fut: Future) -> GenResult | None:
        """A request's answer: its result, its own error line, or (server lost) handed back for later."""
        error = fut.exception()
        key = f.request.key
        if error is None:
            self.streamed.pop(key, None)
            return fut.result()
        if isinstance(error, Refused):              # the server's answer about this request alone
            self.streamed.pop(key, None)
            log.warning("the server refused request %d: %s", key, error)
            return GenResult(key, [], "", "stop", len(f.request.input_ids), 0, error=str(error), refused=True)
        e = self.engine
        if isinstance(error, Unavailable):
            heapq.heappush(self.again, (f.seq, key, f.request))
            if e._up:
                log.warning("lost the server at %s (%s); %d request(s) wait for it, none charged",
                            e.url, error, len(self.flight) + len(self.again))
                e._up, e._backoff = False, FIRST_PROBE_S
                e._probe_at = time.monotonic() + FIRST_PROBE_S
            return None
        if isinstance(error, OwnFailure):           # its caller's callback raised: nothing about the server
            self.streamed.pop(key, None)
            log.warning("request %d failed alone: %r", key, error)
            return failure(key, error, len(f.request.input_ids))
        log.warning("the server failed on request %d: %s", key, error)
        self.rejected = self.rejected or error
        return None

    # -- health --------------------------------------------------------------------------------------

    def _check_health(self) -> None:
        """A probe: of a server that is down (until it answers), or of one that runs our requests."""
        e = self.engine
        now = time.monotonic()
        if self.probe is None and now >= e._probe_at and (not e._up or self.flight):
            self.probe = asyncio.run_coroutine_threadsafe(e._probe(refresh=not e._up), e.loop)
        if self.probe is None or not self.probe.done():
            return
        ok = self.probe.exception() is None
        if ok and not e._up:
            e.info = known(self.probe.result(), e.info)
            log.info("the server at %s answers again; sending the %d request(s) it lost", e.url, len(self.again))
        elif not ok and e._up:
            log.warning("the server at %s does not answer its health probe (%s); handing back the %d "
                        "request(s) in flight", e.url, self.probe.exception(), len(self.flight))
            for key in list(self.flight):
                f = self._land(key)
                f.future.cancel()
                heapq.heappush(self.again, (f.seq, f.request.key, f.request))
        e._up, self.probe = ok, None
        e._backoff = FIRST_PROBE_S if ok else min(e._backoff * 2, e.settings.retry_max_s)
        e._probe_at = now + (e.settings.health_interval_s if ok else e._backoff)
