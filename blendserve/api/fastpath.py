"""Status polls answered before FastAPI when StatusCache holds a fresh reply.

At 200 polls/s a poll's CPU is taken from the engines on a small machine:
uvicorn's own share of a request is ~0.15-0.2 ms, and Starlette and FastAPI's
layers (telemetry check, error middleware, CORS, the front door's body read,
routing, dependencies) add to it. PollDoor runs before any of
them (PollingApp, the API's FastAPI app): a plain GET /v1/batches/{id} (no query
string, no body, no Origin header) is checked with the front door's own
`authenticate` (blendserve/api/auth.py), looked up in the cache under the
caller's tenant and answered with the stored bytes. Everything else, a
refused key, a cache miss included, goes down the full stack unchanged, which
gives the same 401/404 bodies and fills the cache; so the fast path can only
answer what the route itself would have answered from the cache.

A poll answered here leaves no access-log line (QuietPolls): at 200/s those
lines would be most of the log. Cache misses, which read the database (a few a second per batch), and
every error are logged as before.
"""
from __future__ import annotations

import logging
import re
from contextvars import ContextVar

from fastapi import FastAPI
from starlette.types import Receive, Scope, Send

from blendserve.api.auth import FrontDoor
from blendserve.api.deps import AppState
from blendserve.api.errors import APIError

_POLL = re.compile(r"/v1/batches/([A-Za-z0-9_\-]{1,64})")
_LONG_WAY = frozenset((b"content-length", b"transfer-encoding", b"origin"))   # a body, CORS: the full stack
_TYPE = (b"content-type", b"application/json")
ANSWERED: ContextVar[bool] = ContextVar("blendserve_poll_answered", default=False)   # per request (its task)


class PollDoor:
    """Cached status polls, answered without the app (a poll it does not answer goes on unchanged)."""

    def __init__(self, state: AppState) -> None:
        self.cache, self.door = state.status_cache, FrontDoor(None, state)    # only its key check is used

    async def answered(self, scope: Scope, send: Send) -> bool:
        if scope["type"] != "http" or scope["method"] != "GET" or scope["query_string"]:
            return False
        m = _POLL.fullmatch(scope["path"])
        body = self._cached(scope, m.group(1)) if m is not None else None
        if body is None:
            return False
        ANSWERED.set(True)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [_TYPE, (b"content-length", b"%d" % len(body))]})
        await send({"type": "http.response.body", "body": body})
        return True

    def _cached(self, scope: Scope, batch_id: str) -> bytes | None:
        """The stored reply for this caller, or None: the full stack answers (and refuses, with its bodies)."""
        if any(k in _LONG_WAY for k, _ in scope["headers"]):
            return None
        try:
            owner = self.door.authenticate(scope)
        except APIError:
            return None
        return self.cache.get(owner, batch_id) if owner is not None else None


class PollingApp(FastAPI):
    """FastAPI with PollDoor in front of all of it, FastAPI's own per-request telemetry check included."""
    poll_door: PollDoor | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        door = self.poll_door
        if door is None or not await door.answered(scope, send):
            await super().__call__(scope, receive, send)


class QuietPolls(logging.Filter):
    """No access-log line for a poll PollDoor answered from the cache (the line is written in the same task)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not ANSWERED.get()


def install(app: PollingApp, state: AppState) -> None:
    """The app's PollDoor, and QuietPolls on uvicorn's access log."""
    app.poll_door = PollDoor(state)
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, QuietPolls) for f in access.filters):
        access.filters.insert(0, QuietPolls())      # first: a dropped line costs no other filter
