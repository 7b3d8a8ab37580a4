"""A running server as the worker's engine: ``blendserve worker --engine openai --url URL``.

Teams that batch at scale already run engine fleets (``vllm serve``, SGLang's ``launch_server``, SGLang's
router in front of many, on Kubernetes, tensor-parallel across nodes). This engine puts a worker in front
of one such endpoint: the worker keeps planning, claims, results and cancels, the server keeps the GPUs,
and the engine's version pins (torch, CUDA, transformers) stay out of the worker's process.

The plan still decides the order. Requests go to ``/v1/completions`` as token ids, in plan order, one HTTP
request each, and only while a window has room: prompt + max_tokens in flight up to ``in_flight_kv`` times
the server's KV capacity, and at most ``max_in_flight`` requests (twice the running cap where the server
publishes one). Past the running cap the server queues them first-come, so its admission order is the
plan's; the window keeps that queue short, so requests not yet sent can still be cancelled for free and
the next round's plan still applies to them.

A cancel closes the request's connection; vLLM and SGLang abort a request whose client went away.
Interactive requests (``urgent``) are sent at once, past the window, and streamed: their tokens reach
``on_tokens`` chunk by chunk.

A server that dies or restarts loses nothing. A request whose connection fails, or that a router answers
502/503/504 (or 429), is handed back to a queue of its own, in plan order, with no attempt counted; the
engine then sends nothing and probes ``/health`` with a growing back-off until the server answers, reads
its capacity again (a restart may change it), and sends the handed-back requests first. While requests are
in flight it probes ``/health`` every ``health_interval_s`` as well, so a server that hangs without closing
its connections is found too. A 4xx about the request itself (past the context, a parameter refused) is
its error line at once (``GenResult.error``), and the stream runs on. A 500 may be the request's fault:
the engine stops taking new requests, lets the others finish, and then raises, so the worker counts an
attempt for that request alone (blendserve/worker/service.py runs it alone after that).

n > 1, logprobs and structured output (a JSON schema) go to the server as its API spells them: OpenAI's
completions for vLLM and other servers (blendserve/worker/engines/server/calls.py), SGLang's native ``/generate`` for
SGLang's servers and router (blendserve/worker/engines/server/native.py).
"""
from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from blendserve.core.config import ServerEngineSettings
from blendserve.worker.engines.base import EngineStats, GenRequest, GenResult
from blendserve.worker.engines.logprobs import TokenNames
from blendserve.worker.engines.server import native
from blendserve.worker.engines.server.calls import Refused, Rejected, Unavailable, complete, stream
from blendserve.worker.engines.server.discovery import NoModel, ServerInfo, discover, known

log = logging.getLogger("blendserve.worker.server")

DEFAULT_KV_TOKENS = 65536       # a server that publishes no capacity (set BLENDSERVE_SERVER_KV_TOKENS)
DEFAULT_IN_FLIGHT = 256         # a server that publishes neither a running cap nor its KV capacity
# vLLM serve publishes its KV capacity but not its running cap (unless VLLM_SERVER_DEV_MODE=1): the window is
# then bounded by the KV capacity, and by twice vLLM 0.32's largest default max_num_seqs (1024).
UNPUBLISHED_CAP_CEILING = 2048
DEFAULT_STEP_TOKENS = 2048      # vLLM and SGLang both mix prefill chunks with decodes; their usual step
FIRST_PROBE_S = 0.5             # the back-off's first wait, doubling up to retry_max_s
START_WAIT_S = 600.0            # how long a starting worker waits for its server (a large model loads slowly)


def base_url(url: str) -> str:
    """The server's root: /v1/completions, /health and /metrics hang off it (a trailing /v1 is dropped)."""
    url = url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


@dataclass
class _Flight:
    request: GenRequest
    seq: int                        # plan order: the order requests were taken from the stream
    cost: int                       # prompt + max_tokens, counted against the window (0: interactive)
    future: Future


class ServerEngine:
    """One model on a running OpenAI-compatible server, fed in plan order under a window."""

    def __init__(self, model_name: str, settings: ServerEngineSettings, model_path: Path | None = None) -> None:
        if not settings.url:
            raise ValueError("the openai engine needs the server's URL: --url or BLENDSERVE_SERVER_URL")
        self.model_name, self.settings = model_name, settings
        self.url = base_url(settings.url)
        self._tokenizer_path = model_path if model_path is not None and Path(model_path).is_dir() else None
        self._tokenizer: Any = None
        self._token_names: TokenNames | None = None
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="server-engine")
        self.thread.start()
        self.client: httpx.AsyncClient = self._run(self._client())
        self.info = self._wait_for_server(START_WAIT_S)
        self._flight: dict[int, _Flight] = {}
        self._order = itertools.count()
        # Whether the server answers, kept across streams: a stream that ends while it is down (nothing left
        # to hold) leaves the next one to probe first, at the back-off's pace, rather than send.
        self._up, self._backoff, self._probe_at = True, FIRST_PROBE_S, time.monotonic()
        log.info("engine: %s server at %s serving %r (KV %s tokens, running cap %s, priorities %s); "
                 "%d requests in flight at most (%s)", self.info.kind, self.url, self.info.model,
                 self.info.kv_tokens or "unknown", self.info.running_cap or "unknown",
                 "on" if self.info.priorities else "off", self.max_in_flight(), self.in_flight_source())

    # -- what the planner and the dashboard read -----------------------------------------------------

    def kv_capacity_tokens(self) -> int:
        return self.settings.kv_tokens or self.info.kv_tokens or DEFAULT_KV_TOKENS

    def step_token_budget(self) -> int:
        return self.settings.step_tokens or self.info.step_tokens or DEFAULT_STEP_TOKENS

    def hardware(self) -> str | None:
        """The server's device is not this machine's: the configured profile, else unknown."""
        return self.settings.hardware or None

    def stats(self) -> EngineStats:
        """Requests sent and not answered (some may wait in the server's queue); KV use lives in the server."""
        return EngineStats(len(self._flight))

    def max_in_flight(self) -> int:
        """Requests in flight at most: the setting; else twice the running cap the server reports; else, where
        it reports only its KV capacity, a ceiling that leaves the KV window to bound it; else 256."""
        if self.settings.max_in_flight:
            return self.settings.max_in_flight
        if self.info.running_cap:
            return 2 * self.info.running_cap
        return UNPUBLISHED_CAP_CEILING if self.info.kv_tokens else DEFAULT_IN_FLIGHT

    def in_flight_source(self) -> str:
        """Where max_in_flight comes from, for the start-up log."""
        if self.settings.max_in_flight:
            return "BLENDSERVE_SERVER_MAX_IN_FLIGHT"
        if self.info.running_cap:
            return "twice the server's running cap"
        if self.info.kv_tokens:
            return "no running cap published: bounded by the KV capacity"
        return "the server publishes no running cap or KV capacity: the default"

    # -- the stream ---------------------------------------------------------------------------------

    def generate(self, requests: Iterable[GenRequest],
                 cancelled: Callable[[int], bool] | None = None,
                 urgent: Callable[[], list[GenRequest]] | None = None,
                 cancel_epoch: Callable[[], int] | None = None) -> Iterator[GenResult]:
        source = iter(requests)
        flight: dict[int, _Flight] = {}
        self._flight = flight
        done: queue.Queue[tuple[int, Future]] = queue.Queue()
        again: list[tuple[int, int, GenRequest]] = []   # (seq, key, request) handed back by a lost server
        streamed: dict[int, dict[int, int]] = {}        # interactive key -> choice -> tokens its caller has
        waiting: GenRequest | None = None               # taken from the stream; the window had no room yet
        exhausted, rejected = False, None
        used, batch_in_flight = 0, 0
        probe: Future | None = None
        if self._up:
            self._probe_at = time.monotonic() + self.settings.health_interval_s
        seen_epoch, checked_at = None, 0.0

        def send(request: GenRequest, seq: int) -> None:
            nonlocal used, batch_in_flight
            cost = 0 if request.on_tokens is not None or request.key < 0 else \
                len(request.input_ids) + request.params.max_tokens
            fut = asyncio.run_coroutine_threadsafe(self._one(request, streamed, seq), self.loop)
            flight[request.key] = _Flight(request, seq, cost, fut)
            used += cost
            batch_in_flight += cost > 0
            fut.add_done_callback(lambda f, key=request.key: done.put((key, f)))

        def land(key: int) -> _Flight:
            nonlocal used, batch_in_flight
            f = flight.pop(key)
            used -= f.cost
            batch_in_flight -= f.cost > 0
            return f

        def fits(request: GenRequest) -> bool:
            cost = len(request.input_ids) + request.params.max_tokens
            return batch_in_flight == 0 or (used + cost <= self.settings.in_flight_kv * self.kv_capacity_tokens()
                                            and batch_in_flight < self.max_in_flight())

        def hand_back(f: _Flight) -> None:
            heapq.heappush(again, (f.seq, f.request.key, f.request))

        try:
            while True:
                for request in urgent() if urgent is not None else ():
                    seq = -next(self._order) - 1            # ahead of every batch request if handed back
                    if self._up:
                        send(request, seq)
                    else:
                        heapq.heappush(again, (seq, request.key, request))
                if self._up:
                    while again and (again[0][0] < 0 or fits(again[0][2])):
                        seq, _, request = heapq.heappop(again)
                        send(request, seq)
                    while not again:
                        if waiting is None and not exhausted and rejected is None:
                            waiting = next(source, None)
                            exhausted = waiting is None
                        if waiting is None or not fits(waiting):
                            break
                        send(waiting, next(self._order))
                        waiting = None
                if cancelled is not None:
                    epoch = cancel_epoch() if cancel_epoch is not None else None
                    now = time.monotonic()
                    if (epoch is None and now - checked_at > 0.2) or (epoch is not None and epoch != seen_epoch):
                        for key in [k for k in flight if cancelled(k)]:
                            land(key).future.cancel()       # closes the connection: the server aborts it
                        if again:
                            again = [a for a in again if not cancelled(a[1])]
                            heapq.heapify(again)
                        if waiting is not None and cancelled(waiting.key):
                            waiting = None
                        seen_epoch, checked_at = epoch, now
                # A probe: of a server that is down (until it answers), or of one that runs our requests.
                now = time.monotonic()
                if probe is None and now >= self._probe_at and (not self._up or flight):
                    probe = asyncio.run_coroutine_threadsafe(self._probe(refresh=not self._up), self.loop)
                if probe is not None and probe.done():
                    ok = probe.exception() is None
                    if ok and not self._up:
                        self.info = known(probe.result(), self.info)
                        log.info("the server at %s answers again; sending the %d request(s) it lost",
                                 self.url, len(again))
                    elif not ok and self._up:
                        log.warning("the server at %s does not answer its health probe (%s); handing back the %d "
                                    "request(s) in flight", self.url, probe.exception(), len(flight))
                        for key in list(flight):
                            f = land(key)
                            f.future.cancel()
                            hand_back(f)
                    self._up, probe = ok, None
                    self._backoff = FIRST_PROBE_S if ok else min(self._backoff * 2, self.settings.retry_max_s)
                    self._probe_at = now + (self.settings.health_interval_s if ok else self._backoff)
                if not flight and not again and waiting is None and \
                        (exhausted or rejected is not None or (not self._up and probe is None)):
                    break           # all done; or the server is down and nothing is held: the worker idles
                try:
                    events = [done.get(timeout=0.01 if urgent is not None or not self._up else 0.1)]
                except queue.Empty:
                    continue
                while not done.empty():
                    events.append(done.get_nowait())
                for key, fut in events:
                    f = flight.get(key)
                    if f is None or f.future is not fut:
                        continue                            # cancelled, or handed back and sent again
                    land(key)
                    error = fut.exception()
                    if error is None:
                        streamed.pop(key, None)
                        yield fut.result()
                    elif isinstance(error, Refused):        # the server's answer about this request alone
                        streamed.pop(key, None)
                        log.warning("the server refused request %d: %s", key, error)
                        yield GenResult(key, [], "", "stop", len(f.request.input_ids), 0, error=str(error))
                    elif isinstance(error, Unavailable):
                        hand_back(f)
                        if self._up:
                            log.warning("lost the server at %s (%s); %d request(s) wait for it, none charged",
                                        self.url, error, len(flight) + len(again))
                            self._up, self._backoff = False, FIRST_PROBE_S
                            self._probe_at = time.monotonic() + FIRST_PROBE_S
                    else:
                        log.warning("the server failed on request %d: %s", key, error)
                        rejected = rejected or error
            if rejected is not None:
                raise rejected if isinstance(rejected, Rejected) else Rejected(str(rejected))
        finally:            # a stream ended early (an error, the worker stopping) leaves nothing running
            for f in flight.values():
                f.future.cancel()
            if probe is not None:
                probe.cancel()

    # -- the event loop's side ---------------------------------------------------------------------

    async def _one(self, request: GenRequest, streamed: dict[int, dict[int, int]], seq: int) -> GenResult:
        """`seq`: the request's place in the plan (negative: interactive); sent as its priority where the
        server orders its queue by priority (SGLang: higher first; vLLM: lower first)."""
        kind = self.info.kind
        names = self._names() if request.params.logprobs is not None else None
        rank = seq if self.info.priorities else None
        if kind == "sglang":
            tok = self._load_tokenizer()
            vocab = len(tok) if tok is not None else None
            if request.on_tokens is None:
                return await native.generate(self.client, request, vocab, names, rank)
            return await native.stream(self.client, request, vocab, names, streamed.setdefault(request.key, {}),
                                       self.info.incremental, rank)
        encode = None if kind == "vllm" else self._encoder()
        if request.on_tokens is None:
            return await complete(self.client, request, self.info.model, kind, encode, names, rank)
        return await stream(self.client, request, self.info.model, kind, encode, names,
                            streamed.setdefault(request.key, {}), rank)

    async def _probe(self, refresh: bool) -> ServerInfo | None:
        """Raises unless the server answers /health (and, after an outage, tells its figures again)."""
        r = await self.client.get("/health", timeout=max(3 * self.settings.connect_timeout_s, 30.0))
        if r.status_code != 200:
            raise Unavailable(f"/health answered {r.status_code}")
        return await discover(self.client, self.settings.model, self.model_name) if refresh else None

    async def _client(self) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.settings.api_key}"} if self.settings.api_key else {}
        return httpx.AsyncClient(base_url=self.url, headers=headers,
                                 timeout=httpx.Timeout(None, connect=self.settings.connect_timeout_s),
                                 limits=httpx.Limits(max_connections=None, max_keepalive_connections=1024))

    def _run(self, coro: Any, timeout: float | None = None) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def _wait_for_server(self, patience_s: float) -> ServerInfo:
        """The server's figures, waiting (with the outage back-off) while it starts; a server that serves
        another model is an error at once."""
        deadline, wait = time.monotonic() + patience_s, FIRST_PROBE_S
        while True:
            try:
                return self._run(discover(self.client, self.settings.model, self.model_name))
            except NoModel:
                raise
            except (httpx.HTTPError, ValueError) as e:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the server at {self.url} did not answer in {patience_s:.0f}s: {e}") from e
                log.info("waiting for the server at %s (%s)", self.url, e)
                time.sleep(wait)
                wait = min(wait * 2, self.settings.retry_max_s)

    def _load_tokenizer(self) -> Any:
        """The model's tokenizer where the worker has its checkpoint (loaded once); None otherwise."""
        if self._tokenizer is None and self._tokenizer_path is not None:
            from blendserve.core.modelstore import load_tokenizer

            self._tokenizer = load_tokenizer(self._tokenizer_path)
        return self._tokenizer

    def _encoder(self) -> Callable[[str], list[int]] | None:
        """Text to token ids, for servers that return text only."""
        tok = self._load_tokenizer()
        return None if tok is None else (lambda text: tok(text, add_special_tokens=False)["input_ids"])

    def _names(self) -> TokenNames | None:
        """Token ids to logprobs' texts and bytes, as the other engines name them."""
        if self._token_names is None and (tok := self._load_tokenizer()) is not None:
            self._token_names = TokenNames(tok)
        return self._token_names

    def close(self) -> None:
        if self.loop.is_closed():
            return
        try:
            self._run(self.client.aclose(), timeout=5)
        except Exception:
            log.debug("closing the server engine's client failed", exc_info=True)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
