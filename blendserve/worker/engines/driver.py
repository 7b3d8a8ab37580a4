"""One driver for every engine: the `Engine.generate` contract written once, over a small adapter.

An engine's adapter (`EngineCore`, one per stream) says what only it knows: whether another batch request
may go in now (`room`, `fits`), how to put one in (`add`) or take some out (`abort`), and what one engine
step produced (`step`: finished results and streamed token deltas), as vLLM's `LLMEngine` is
add_request / abort_request / step. The driver (`drive`) owns what the worker relies on, the same for every
engine: admission in plan order without reading ahead, interactive requests handed over before every
step, cancel sweeps only when the cancel epoch moved, token deltas to `on_tokens` on the worker's thread,
results of cancelled requests dropped, and the end of the stream (nothing left in the engine, nothing
left to feed). The plan's source may yield None for "nothing ready now": the stream ends there if the
engine is idle, and otherwise asks again at its next admission, so a chunk planned while interactive
work keeps the engine busy is taken up in that same stream. Where an engine schedules admission inside its
own step (the CPU engine admits a request only where the step's budget and free blocks hold its first
chunk), its adapter pulls from the driver's `Feed` instead (`pulls`), which keeps the same order and the
same no-read-ahead rule.

A request fails alone (docs/design.md §12.1): an exception raised while the driver or an adapter works on
one request (its admission, its token deltas; an adapter's own per-request work, through `Feed.fail`)
becomes that request's error result, the request leaves the engine, and the stream runs on. Only an
exception no request can be blamed for (a shared forward step) ends the stream, for the worker's
poison-request path.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from blendserve.worker.engines.base import GenRequest, GenResult, TokenLogprob

_SPENT = object()        # the plan's source has ended (a None from it means "nothing ready now")


class Refused(ValueError):
    """The request's own input cannot run on this engine (a token id past its vocabulary, an empty prompt):
    it fails alone before it enters a step, and an interactive caller gets a 400."""


def failure(key: int, error: BaseException, prompt_tokens: int = 0) -> GenResult:
    """The error result of one request that raised `error`: its input's fault (`Refused`) or the engine's."""
    refused = isinstance(error, Refused)
    message = str(error) if refused else f"The engine failed on this request: {type(error).__name__}: {error}"
    return GenResult(key, [], "", "stop", prompt_tokens, 0, error=message, refused=refused)


@dataclass(frozen=True)
class Tokens:
    """A run of newly committed token ids of one streamed request (choice `choice`), for its `on_tokens`."""
    key: int
    ids: list[int]
    choice: int = 0
    logprobs: list[TokenLogprob] | None = None


def stream_tokens(request: GenRequest, ids: list[int], choice: int = 0,
                  logprobs: list[TokenLogprob] | None = None) -> None:
    """Hand `ids` to the request's `on_tokens`, with `choice=` and `logprobs=` where it asked for n > 1 or
    logprobs (GenRequest.on_tokens): callers of one-choice requests without logprobs take the ids alone."""
    if request.on_tokens is None:
        return
    if request.params.n > 1 or request.params.logprobs is not None:
        request.on_tokens(ids, choice=choice, logprobs=logprobs)
    else:
        request.on_tokens(ids)


class Feed:
    """The driver's side of one stream, as an adapter that admits inside its own step reaches it."""

    def __init__(self, requests: Iterable[GenRequest], urgent: Callable[[], list[GenRequest]] | None,
                 live: dict[int, GenRequest]) -> None:
        self._source = iter(requests)
        self._urgent = urgent
        self._live = live
        self.exhausted = False
        self.dry = False                      # the plan had nothing ready when last asked
        self.failed: list[GenResult] = []     # requests that failed alone, for the driver to yield

    @property
    def interactive(self) -> bool:
        """Whether the stream has an interactive lane to poll (an adapter polls it between layers only then)."""
        return self._urgent is not None

    def next(self) -> GenRequest | None:
        """The next batch request in plan order, counted as in the engine from here on; None once the
        stream is spent, or where the plan has nothing ready now (the source yielded None: `dry`, asked
        again at the next call). Call it only for a request that can be admitted now."""
        if self.exhausted:
            return None
        request = next(self._source, _SPENT)
        if request is _SPENT:
            self.exhausted = True
            return None
        self.dry = request is None
        if request is not None:
            self._live[request.key] = request
        return request

    def urgent(self) -> list[GenRequest]:
        """Interactive requests handed over now, counted as in the engine; the caller admits them."""
        got = list(self._urgent()) if self._urgent is not None else []
        for request in got:
            self._live[request.key] = request
        return got

    def fail(self, request: GenRequest, error: BaseException) -> None:
        """`request` raised `error` in work of its own: it leaves the stream with an error result; the
        adapter has already taken it out of the engine (or never put it in)."""
        if self._live.pop(request.key, None) is not None:
            self.failed.append(failure(request.key, error, len(request.input_ids)))

    def drain(self) -> list[GenResult]:
        """The failures recorded since the last call."""
        out, self.failed = self.failed, []
        return out


class EngineCore(Protocol):
    """One stream's adapter over an engine. Everything engine-specific lives here; `drive` runs it."""

    # Without a cancel epoch: seconds between two cancel sweeps (0: before every step).
    sweep_s: float
    # The adapter admits batch requests inside its own step, through Feed.next (room/fits/add are not used
    # for batch requests then).
    pulls: bool

    def room(self) -> bool:
        """Whether another batch request may go in now, before it is read from the plan."""
        ...

    def fits(self, request: GenRequest) -> bool:
        """Whether this batch request, read and held by the driver, may go in now."""
        ...

    def add(self, request: GenRequest, urgent: bool) -> None:
        """Put a request into the engine; `urgent`: an interactive one, ahead of every waiting batch request."""
        ...

    def abort(self, keys: list[int]) -> None:
        """Take these requests out of the engine, without a result."""
        ...

    def busy(self) -> bool:
        """Whether the engine still holds requests of this stream (running, queued or handed back)."""
        ...

    def step(self, feed: Feed) -> Iterable[GenResult | Tokens]:
        """One engine step, or a short wait for one: what finished and what was streamed meanwhile."""
        ...

    def close(self) -> None:
        """The stream ends (spent, stopped early or failed): abort whatever is still in the engine."""
        ...


class CoreDefaults:
    """What most adapters answer: sweeps before every step, requests admitted by the driver, no per-request
    limit beyond `room`."""

    sweep_s = 0.0
    pulls = False

    def room(self) -> bool:
        return True

    def fits(self, request: GenRequest) -> bool:
        return True


def drive(core: EngineCore, requests: Iterable[GenRequest],
          cancelled: Callable[[int], bool] | None = None,
          urgent: Callable[[], list[GenRequest]] | None = None,
          cancel_epoch: Callable[[], int] | None = None) -> Iterator[GenResult]:
    """`Engine.generate` over `core`: see blendserve.worker.engines.base.Engine.generate for the contract."""
    live: dict[int, GenRequest] = {}
    feed = Feed(requests, urgent, live)
    sweep = _Sweep(core, cancelled, cancel_epoch)
    waiting: GenRequest | None = None          # read from the plan; the engine had no room for it yet
    try:
        while True:
            for request in feed.urgent():
                add(core, feed, request, urgent=True)
            if not core.pulls:
                waiting = _admit(core, feed, waiting)
            if sweep.due():
                waiting = sweep.run(live, waiting)
            yield from feed.drain()
            if waiting is None and not core.busy() and (feed.exhausted or feed.dry
                                                         or not (core.pulls or core.room())):
                return
            if not core.busy() and not core.pulls:
                continue                               # all of it cancelled: admit again first
            for out in core.step(feed):
                request = live.get(out.key)
                if request is None:
                    continue                           # cancelled or failed meanwhile
                if isinstance(out, Tokens):
                    _stream(core, feed, request, out)
                else:
                    del live[out.key]
                    yield out
            yield from feed.drain()
    finally:
        core.close()


def add(core: EngineCore, feed: Feed, request: GenRequest, urgent: bool) -> bool:
    """`core.add`, where an exception fails the request alone (whatever the adapter put in is taken out);
    whether it went in."""
    try:
        core.add(request, urgent)
        return True
    except Exception as e:
        _out(core, request)
        feed.fail(request, e)
        return False


def _stream(core: EngineCore, feed: Feed, request: GenRequest, out: Tokens) -> None:
    """Token deltas to the request's caller; a callback that raises fails that request alone."""
    try:
        stream_tokens(request, out.ids, out.choice, out.logprobs)
    except Exception as e:
        _out(core, request)
        feed.fail(request, e)


def _out(core: EngineCore, request: GenRequest) -> None:
    """Take a failed request out of the engine; an adapter that cannot is left to its stream's end."""
    try:
        core.abort([request.key])
    except Exception:
        pass


def _admit(core: EngineCore, feed: Feed, waiting: GenRequest | None) -> GenRequest | None:
    """Batch requests into the engine in plan order while it has room; returns the one read but not let in."""
    while core.room():
        request = waiting if waiting is not None else feed.next()
        if request is None:
            return None
        if not core.fits(request):
            return request
        add(core, feed, request, urgent=False)
        waiting = None
    return waiting


class _Sweep:
    """When to ask `cancelled` about every request of the stream: when the cancel epoch moved since the last
    sweep (Engine.generate), or, without an epoch, every `core.sweep_s` seconds."""

    def __init__(self, core: EngineCore, cancelled: Callable[[int], bool] | None,
                 cancel_epoch: Callable[[], int] | None) -> None:
        self.core, self.cancelled, self.epoch = core, cancelled, cancel_epoch
        self.seen: int | None = None
        self.at = float("-inf")

    def due(self) -> bool:
        if self.cancelled is None:
            return False
        if self.epoch is not None:
            now = self.epoch()                      # read before the pass: a move during it is seen next time
            if now == self.seen:
                return False
            self.seen = now
            return True
        if time.monotonic() - self.at < self.core.sweep_s:
            return False
        self.at = time.monotonic()
        return True

    def run(self, live: dict[int, GenRequest], waiting: GenRequest | None) -> GenRequest | None:
        assert self.cancelled is not None
        gone = [key for key in live if self.cancelled(key)]
        if gone:
            self.core.abort(gone)
            for key in gone:
                del live[key]
        return None if waiting is not None and waiting.key in gone else waiting
