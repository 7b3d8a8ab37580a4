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
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx

from blendserve.core.engine_settings import ServerEngineSettings
from blendserve.worker.engines.base import EngineStats, GenRequest, GenResult
from blendserve.worker.engines.driver import drive
from blendserve.worker.engines.logprobs import TokenNames
from blendserve.worker.engines.server import native
from blendserve.worker.engines.server.calls import Unavailable, complete, stream
from blendserve.worker.engines.server.core import FIRST_PROBE_S, ServerCore
from blendserve.worker.engines.server.discovery import NoModel, ServerInfo, discover

log = logging.getLogger("blendserve.worker.server")

DEFAULT_KV_TOKENS = 65536       # a server that publishes no capacity (set BLENDSERVE_SERVER_KV_TOKENS)
DEFAULT_IN_FLIGHT = 256         # a server that publishes neither a running cap nor its KV capacity
# vLLM serve publishes its KV capacity but not its running cap (unless VLLM_SERVER_DEV_MODE=1): the window is
# then bounded by the KV capacity, and by twice vLLM 0.32's largest default max_num_seqs (1024).
UNPUBLISHED_CAP_CEILING = 2048
DEFAULT_STEP_TOKENS = 2048      # vLLM and SGLang both mix prefill chunks with decodes; their usual step
START_WAIT_S = 600.0            # how long a starting worker waits for its server (a large model loads slowly)


def base_url(url: str) -> str:
    """The server's root: /v1/completions, /health and /metrics hang off it (a trailing /v1 is dropped)."""
    url = url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


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
        self._flight: dict = {}
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
        yield from drive(ServerCore(self, urgent is not None), requests, cancelled, urgent, cancel_epoch)

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
