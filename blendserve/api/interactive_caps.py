"""Each tenant's share of interactive work: requests in flight, the size of one answer, and callers that left.

A tenant may have BLENDSERVE_LIMIT_INTERACTIVE_PER_TENANT interactive requests
in flight on this API process; one more is a 429 with Retry-After, so the API's
connections to the workers (BLENDSERVE_LIMIT_POOL_SIZE, always more than one
tenant's share) are never all held by one tenant. One request may ask for
n * max_tokens tokens up to BLENDSERVE_LIMIT_OUTPUT_TOKENS and for
top_logprobs * n * max_tokens logprob entries up to BLENDSERVE_LIMIT_LOGPROB_ENTRIES
(a 400 naming the limit): `n: 128` with `top_logprobs: 20` would otherwise
build an answer of a hundred megabytes. A request that leaves max_tokens out
counts the model's context length (its config.json), as the worker will fill it.

A caller that hangs up is noticed at once (the ASGI disconnect message, raced
against the worker's answer, streamed or not): the call to the worker is
cancelled, which closes that connection, and the worker drops the request from
its engine at the next step (blendserve/worker/http_io.py `hung_up`).
"""
from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import anyio
import httpx
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive

from blendserve.api.errors import APIError
from blendserve.core.limit_settings import LimitSettings
from blendserve.protocol.answer_size import AnswerLimits, check_answer, top_of
from blendserve.protocol.fields import BodyError
from blendserve.protocol.nesting import MAX_DEPTH, check_depth

FALLBACK_CONTEXT = 32768       # a model whose checkpoint says nothing (not converted yet)
_CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length")


class Shares:
    """Interactive requests in flight per tenant, on this API process; the event loop is the only writer."""

    def __init__(self, limits: LimitSettings, keyed: bool) -> None:
        # Without API keys every caller is one tenant, with nobody to share with: no cap.
        self.cap = limits.interactive_per_tenant if keyed else 0
        self.answer = AnswerLimits.of(limits)
        self.in_flight: dict[str, int] = {}
        self.contexts: dict[str, int] = {}

    def take(self, owner: str) -> Callable[[], None]:
        """One slot of the owner's share, or APIError 429; returns the release (safe to call twice)."""
        held = self.in_flight.get(owner, 0)
        if self.cap and held >= self.cap:
            raise APIError(429, f"Too many interactive requests in flight for this tenant (limit {self.cap}, "
                           "BLENDSERVE_LIMIT_INTERACTIVE_PER_TENANT); retry when one has finished.",
                           code="rate_limit_exceeded", headers={"Retry-After": "1"})
        self.in_flight[owner] = held + 1
        done = False

        def release() -> None:
            nonlocal done
            if not done:
                done = True
                left = self.in_flight.get(owner, 1) - 1
                if left > 0:
                    self.in_flight[owner] = left
                else:
                    self.in_flight.pop(owner, None)

        return release

    def check_size(self, body: dict, model: str, checkpoint: Path | None, raw: bytes = b"") -> None:
        """APIError 400 when the body nests deeper than a batch line may (blendserve/protocol/nesting.py), or
        when one answer would be over the output or logprob bounds."""
        if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH:      # at most this deep: most bodies skip the walk
            try:
                check_depth(body)
            except BodyError as e:
                raise APIError(400, e.message, code=e.code) from None
        asked = next((body[k] for k in ("max_completion_tokens", "max_tokens", "max_output_tokens")
                      if body.get(k) is not None), None)
        try:
            check_answer(body.get("n"), asked, top_of(body.get("logprobs"), body.get("top_logprobs")),
                         self._context(model, checkpoint), self.answer)
        except BodyError as e:
            raise APIError(400, e.message, param=e.param, code=e.code) from None

    def _context(self, model: str, checkpoint: Path | None) -> int:
        if model not in self.contexts:
            found = _read_context(checkpoint)
            if found is None:
                return FALLBACK_CONTEXT      # asked again next time: the checkpoint may appear
            self.contexts[model] = found
        return self.contexts[model]


def _read_context(checkpoint: Path | None) -> int | None:
    try:
        config = json.loads((checkpoint / "config.json").read_text()) if checkpoint else {}
    except (OSError, ValueError):
        return None
    return next((int(config[k]) for k in _CONTEXT_KEYS if isinstance(config.get(k), int)), None)


async def _hang_up(receive: Receive) -> None:
    """Returns when the caller disconnects. The body was read whole before: only a disconnect can come."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def relay(request: Request, call: Awaitable[httpx.Response], release: Callable[[], None]) -> Response:
    """The worker's answer, raced against the caller hanging up. A JSON answer is read whole here; a stream is
    relayed chunk by chunk. Whatever happens, the worker's connection is closed or returned and the slot
    released; a caller that left gets nothing (a 499 nobody reads) and the worker's call is cancelled."""
    gone = asyncio.ensure_future(_hang_up(request.receive))
    work = asyncio.ensure_future(_answer(call))
    try:
        await asyncio.wait({gone, work}, return_when=asyncio.FIRST_COMPLETED)
        upstream, content = await work if work.done() else (None, None)
    except BaseException:
        release()
        raise
    finally:
        if not work.done():
            work.cancel()                  # httpx closes the connection of a cancelled call
            await asyncio.gather(work, return_exceptions=True)
        gone.cancel()
    if upstream is None:
        release()
        return Response(status_code=499)
    if content is not None:
        release()
        return Response(content, status_code=upstream.status_code, media_type="application/json")
    async def done() -> None:          # idempotent: the stream's end, or a stream cut before its first chunk
        release()
        with anyio.CancelScope(shield=True):
            await upstream.aclose()

    return StreamingResponse(_chunks(upstream, done), status_code=upstream.status_code, background=BackgroundTask(done),
                             media_type="text/event-stream", headers={"cache-control": "no-cache"})


async def _answer(call: Awaitable[httpx.Response]) -> tuple[httpx.Response, bytes | None]:
    """The worker's response and, unless it is a stream, its whole body (the connection back in the pool)."""
    upstream = await call
    if upstream.headers.get("content-type", "").startswith("text/event-stream"):
        return upstream, None
    try:
        return upstream, await upstream.aread()
    finally:
        await upstream.aclose()


async def _chunks(upstream: httpx.Response, done: Callable[[], Awaitable[None]]) -> AsyncIterator[bytes]:
    """A stream's bytes as they come. Starlette cancels this when the caller hangs up; the close is shielded so
    the worker's connection is closed (and its request dropped) even then. A stream cancelled before it
    started never runs this `finally`: the response's background task closes it then."""
    try:
        async for chunk in upstream.aiter_raw():
            yield chunk
    finally:
        await done()
