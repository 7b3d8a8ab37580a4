"""The API's front door, as pure ASGI middleware: who is calling is settled from the headers alone, before a
byte of the body is read, and then the body is read with a bound per route.

FastAPI parses a JSON body before dependencies run, so a key checked in a
dependency comes after the body is in memory: an unauthenticated client could
make the API buffer anything it sends. Here a missing or wrong key is a 401
written right after the request line and headers; the body stays unread and
the server closes the connection. An authenticated body is then read up to
its route's bound (413 beyond it, at once when Content-Length says so), and
handed to the app; the upload route streams to the file store and gets the
bound checked chunk by chunk instead.

Doors: everything is behind an API key except the probes (/health, /ready),
the API docs, /metrics (its own token, BLENDSERVE_METRICS_TOKEN, when set) and
the dashboard page with its login and logout (its JSON route takes a key or
a session cookie, blendserve/api/sessions.py). The caller's owner is left in
scope["state"]["owner"] for the routes (blendserve/api/deps.py).
"""
from __future__ import annotations

import hmac
import logging
import re
from http.cookies import CookieError, SimpleCookie

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from blendserve.api.errors import APIError
from blendserve.api.sessions import COOKIE

OPEN = {"/health", "/ready", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json",
        "/dashboard", "/dashboard/login", "/dashboard/logout"}
SMALL = 64 * 1024                 # a batch create, a cancel, a form: kilobytes at most
LARGE = 8 * 1024 * 1024           # an interactive request (long prompts), as OpenAI's own bound
UPLOAD = ("POST", "/v1/files")
PART = re.compile(r"/v1/uploads/[^/]+/parts")    # an Uploads API part: streamed as a file upload is
PART_LIMIT = 64 * 1024 * 1024 + 1024 * 1024
# (method, path pattern, bound in bytes); the first match wins, the last line is the default.
LIMITS = [("POST", re.compile(r"/v1/batches(/[^/]+/cancel)?"), SMALL),
          ("POST", re.compile(r"/v1/.*"), LARGE),
          ("POST", re.compile(r"/dashboard/log(in|out)"), 8 * 1024),
          ("", re.compile(r".*"), SMALL)]


def body_limit(method: str, path: str) -> int:
    for m, pattern, limit in LIMITS:
        if (not m or m == method) and pattern.fullmatch(path):
            return limit
    return SMALL


def header(scope: Scope, name: bytes) -> str:
    return next((v.decode("latin-1") for k, v in scope["headers"] if k == name), "")


def bearer(scope: Scope) -> str | None:
    scheme, _, token = header(scope, b"authorization").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def has_body(scope: Scope) -> bool:
    declared = header(scope, b"content-length")
    return declared not in ("", "0") or bool(header(scope, b"transfer-encoding"))


def session_cookie(scope: Scope) -> str:
    try:
        jar = SimpleCookie(header(scope, b"cookie"))
    except CookieError:
        return ""
    morsel = jar.get(COOKIE)
    return morsel.value if morsel else ""


async def send_error(send: Send, err: APIError, unread: bool = False) -> None:
    """The error, and with `unread` (a body is coming that nobody will read) `Connection: close`: the server
    hangs up after the answer instead of reading and discarding the rest to keep the connection."""
    body = orjson.dumps({"error": {"message": err.message, "type": err.type, "param": err.param, "code": err.code}})
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if unread:
        headers.append((b"connection", b"close"))
    if err.status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    headers += [(k.lower().encode(), v.encode()) for k, v in err.headers.items()]
    await send({"type": "http.response.start", "status": err.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class FrontDoor:
    def __init__(self, app: ASGIApp, state) -> None:   # state: blendserve.api.deps.AppState
        self.app, self.state = app, state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            scope.setdefault("state", {})["owner"] = self.authenticate(scope)
            streamed = _streamed(scope, self.state.settings.max_file_bytes)
            limit = streamed or body_limit(scope["method"], scope["path"])
            declared = header(scope, b"content-length")
            if declared and (not declared.isascii() or not declared.isdigit()):
                raise APIError(400, "The Content-Length header is not a number.", code="invalid_request")
            if declared and int(declared) > limit:
                raise _too_large(limit)
        except APIError as err:
            await send_error(send, err, unread=has_body(scope))
            return
        if streamed:
            await self.app(scope, _counted(receive, limit), send)
            return
        try:
            body = await _read(receive, limit)
        except APIError as err:
            await send_error(send, err, unread=True)
            return
        if body is None:            # the client went away
            return
        await self.app(scope, _replay(body, receive), send)

    def authenticate(self, scope: Scope) -> str | None:
        """The owner the request speaks for ("" without keys, None on the open doors); APIError 401 if none."""
        keyring, path = self.state.keyring, scope["path"]
        if scope["method"] == "OPTIONS" and self.state.settings.cors_origins:
            return None               # a CORS preflight carries no credentials; CORSMiddleware answers it
        if path == "/metrics":
            token = self.state.settings.metrics_token
            if token and not hmac.compare_digest((bearer(scope) or "").encode(), token.encode()):
                raise APIError(401, "/metrics needs its token: 'Authorization: Bearer METRICS_TOKEN'.",
                               code="invalid_api_key")
            return None
        if path in OPEN:
            return None
        if not keyring:
            return ""
        token = bearer(scope)
        if token is None and path.startswith("/dashboard/"):
            owner = self.state.signer.owner(session_cookie(scope), keyring)
            if owner is not None:
                return owner
        if token is None:
            raise APIError(401, "You didn't provide an API key. Pass it as 'Authorization: Bearer YOUR_KEY'.",
                           code="missing_api_key")
        owner = keyring.owner_of(token)
        if owner is None:
            raise APIError(401, "Incorrect API key provided.", code="invalid_api_key")
        return owner


def _streamed(scope: Scope, max_file_bytes: int) -> int:
    """The body bound of a request whose body streams to the file store (never buffered here); 0: others."""
    if scope["method"] != "POST":
        return 0
    if scope["path"] == UPLOAD[1]:
        return max_file_bytes + 1024 * 1024
    return PART_LIMIT if PART.fullmatch(scope["path"]) else 0


def _too_large(limit: int) -> APIError:
    return APIError(413, f"The request body exceeds {limit} bytes.", code="request_too_large")


async def _read(receive: Receive, limit: int) -> bytes | None:
    chunks, size = [], 0
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            return None
        part = msg.get("body", b"")
        size += len(part)
        if size > limit:
            raise _too_large(limit)
        chunks.append(part)
        if not msg.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()       # after the body: only a disconnect can come

    return replay


def _counted(receive: Receive, limit: int) -> Receive:
    size = 0

    async def counted() -> Message:
        nonlocal size
        msg = await receive()
        size += len(msg.get("body", b""))
        if size > limit:
            raise _too_large(limit)
        return msg

    return counted


_SECRET_PARAM = re.compile(r"([?&](?:key|api_key|api-key|token|access_token|secret)=)[^&\s]*", re.IGNORECASE)


class RedactSecrets(logging.Filter):
    """Access-log lines carry the request's query string: a key put in a URL (an old bookmark of
    `/dashboard?key=...`, a misconfigured client) is logged as `key=***`. Nothing here reads keys from URLs."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(isinstance(a, str) and "=" in a for a in record.args):
            record.args = tuple(_SECRET_PARAM.sub(r"\1***", a) if isinstance(a, str) else a for a in record.args)
        return True


class QuietProbes(logging.Filter):
    """No access-log line for a probe (`/health`, `/ready`): an orchestrator, a load balancer or `serve`'s own
    readiness check asks every second or two, and those lines would bury the requests (their answers are
    the prober's to report, and /metrics counts them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        return not (isinstance(args, tuple) and len(args) >= 3 and args[2] in ("/health", "/ready"))


def redact_access_log() -> None:
    access = logging.getLogger("uvicorn.access")
    for kind in (RedactSecrets, QuietProbes):
        if not any(isinstance(f, kind) for f in access.filters):
            access.addFilter(kind())
