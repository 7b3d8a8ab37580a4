"""Status polls answered before FastAPI when StatusCache holds a fresh reply.

A poll that hits the cache needs no routing, no dependency resolution and no
thread: this ASGI middleware runs inside the front door (blendserve/api/auth.py),
which has already settled the caller's tenant; it looks the batch up in the
cache and replies. Everything else (a miss, any other route) goes on to the
app, which fills the cache.
"""
from __future__ import annotations

import re

from starlette.types import ASGIApp, Receive, Scope, Send

from blendserve.api.deps import AppState

_POLL = re.compile(r"^/v1/batches/([A-Za-z0-9_\-]{1,64})$")


class StatusFastPath:
    def __init__(self, app: ASGIApp, state: AppState) -> None:
        self.app, self.state = app, state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and not scope.get("query_string"):
            m = _POLL.match(scope["path"])
            if m:
                owner = scope.get("state", {}).get("owner")
                body = self.state.status_cache.get(owner, m.group(1)) if owner is not None else None
                if body is not None:
                    await send({"type": "http.response.start", "status": 200, "headers": [
                        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
                    await send({"type": "http.response.body", "body": body})
                    return
        await self.app(scope, receive, send)
