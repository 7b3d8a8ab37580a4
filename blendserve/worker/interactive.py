"""The worker's interactive endpoint: synchronous and streamed completions, run ahead of batch work.

The API authenticates a caller and forwards the raw body here (the worker's
row in the job table says where it listens), so an interactive request
reaches the engine in a millisecond, not through a planning round. This
endpoint checks the body with the same rules as a batch line (blendserve/protocol/bodies.py),
tokenizes it, and puts it in the lane (blendserve/worker/lane.py), whose N_max / T_max
rule lets it into the engine at the next step. It answers exactly what
OpenAI's endpoints answer: one JSON body, or server-sent events
(`chat.completion.chunk` / `text_completion` chunks, an optional usage chunk,
then `data: [DONE]`).

It listens on loopback by default: the API is the authenticated front door,
and at scale-out this port belongs on the cluster's internal network only.
The standard library's threaded server is enough here: each call is a thread
that waits for its own tokens, and the engine thread never blocks on a client.
"""
from __future__ import annotations

import dataclasses
import hmac
import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

from blendserve.core.config import TENANT_HEADER, WORKER_SECRET_HEADER
from blendserve.protocol.bodies import check_interactive
from blendserve.protocol.fields import BodyError, ModelInfo, token_id_error
from blendserve.protocol.requests import RequestBody
from blendserve.protocol.results import response_body
from blendserve.worker import interactive_api
from blendserve.worker.bounded_http import BoundedHTTPServer
from blendserve.worker.engines.base import GenRequest, GenResult
from blendserve.worker.http_io import Call, TextStream, error_body, send_json
from blendserve.worker.lane import Lane
from blendserve.worker.sse import ChunkStream

log = logging.getLogger("blendserve.worker")

ENDPOINTS = ("/v1/chat/completions", "/v1/completions")
MAX_BODY = 8 * 1024 * 1024


class InteractiveServer:
    def __init__(self, lane: Lane, info: ModelInfo, tokenizer, model_name: str, host: str, port: int,
                 fingerprint: str | None = None, secret: str = "") -> None:
        self.lane, self.info, self.tokenizer, self.model_name = lane, info, tokenizer, model_name
        self.fingerprint = fingerprint      # system_fingerprint of what the engine computes (worker/engines/base.py)
        self.calls: dict[int, Call] = {}
        # Requests of the calls in flight, and the keys whose caller already has tokens: after a failed stream
        # the others run again alone (blendserve/worker/poison.py), docs/design.md §12.1.
        self.requests: dict[int, GenRequest] = {}
        self.sent: set[int] = set()
        self.closing = False
        # Only the API may call: with BLENDSERVE_WORKER_SECRET set, a call without it is a 401. Off loopback,
        # the secret is required, so a worker bound on a cluster network is never an open door to the engine.
        self.secret = secret
        if not self.secret and host not in ("127.0.0.1", "localhost", "::1"):
            raise RuntimeError(f"the interactive endpoint would listen on {host} with no "
                               "BLENDSERVE_WORKER_SECRET; set one, the same for the API and every worker")
        self.httpd = BoundedHTTPServer((host, port), self._handler())     # threads bounded (bounded_http.py)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]

    def start(self) -> None:
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True,
                         name="interactive").start()

    def close(self) -> None:
        """Refuse new calls; calls in flight are told the worker is stopping (the API may retry elsewhere)."""
        self.closing = True
        for key in list(self.calls):
            self.abort(key, "The worker is stopping.")
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- called from the engine's thread ----------------------------------------------------------

    def finish(self, result: GenResult) -> None:
        """The call's result, or its own error (`result.error`: a 400 where its input is at fault, else a 500;
        never a 503, which would send the same request on to the next worker)."""
        if (call := self.calls.get(result.key)) is not None:
            call.finished = True
            call.events.put(("done" if result.error is None else "failed", result))

    def taken(self) -> list[GenRequest]:
        """Requests of calls in flight that the engine took from the lane (none of them finished)."""
        waiting = self.lane.waiting_keys()
        return [r for key, r in list(self.requests.items()) if key not in waiting
                and (call := self.calls.get(key)) is not None and not call.finished]

    def abort(self, key: int, message: str) -> None:
        if (call := self.calls.get(key)) is not None:
            call.events.put(("error", message))

    # -- the HTTP side ----------------------------------------------------------------------------------

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"      # one call per connection; a stream ends when it closes

            def log_message(self, fmt: str, *args: Any) -> None:   # the API logs requests; keep this quiet
                pass

            def do_POST(self) -> None:
                server._serve(self)

        return Handler

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        t0 = time.perf_counter()
        if self.secret and not hmac.compare_digest(h.headers.get(WORKER_SECRET_HEADER, "").encode(),
                                                   self.secret.encode()):
            h.close_connection = True        # the body stays unread
            return send_json(h, 401, error_body("This endpoint answers the API only.", "invalid_worker_secret", None))
        if h.path not in ENDPOINTS and h.path not in interactive_api.ENDPOINTS:
            return send_json(h, 404, error_body(f"Unknown path {h.path}.", "not_found", None, "invalid_request_error"))
        if self.closing:
            return send_json(h, 503, error_body("The worker is stopping.", "worker_stopping", None, "server_error"))
        try:
            length = int(h.headers.get("content-length") or 0)
            if length > MAX_BODY:
                raise BodyError("request_too_large", f"The body exceeds {MAX_BODY} bytes.")
            body = json.loads(h.rfile.read(length) or b"null")
            if h.path in interactive_api.ENDPOINTS:
                api_req, body, streaming = interactive_api.prepare(self.info, self.lane, h.path, body)
            elif self.info.task == "embed":
                raise BodyError("invalid_value", f"'{self.model_name}' is an embedding model: it serves only "
                                f"{interactive_api.ENDPOINTS[0]}.", "model")
            else:
                req = check_interactive(h.path, body, self.info)
                if (bad := token_id_error(req.prompt_ids, self.info.vocab_size)) is not None:
                    raise BodyError("invalid_value", bad, "prompt")   # before it can reach a step shared with others
                params = req.request.sampling_params(req.max_tokens)
                tool = req.request.tool_call()
        except json.JSONDecodeError as e:
            return send_json(h, 400, error_body(f"The body is not valid JSON: {e.msg}.", "invalid_json", None))
        except BodyError as e:
            return send_json(h, 400, error_body(e.message, e.code, e.param))
        if h.path in interactive_api.ENDPOINTS:
            return self._serve_api(h, api_req, streaming, body)
        key = self.lane.new_key()
        call = self.calls[key] = Call(key, h.path, tool)
        texts = [TextStream(self.tokenizer, params.stop) for _ in range(params.n)] if req.stream else []

        def on_tokens(ids: list[int], choice: int = 0, logprobs: list | None = None) -> None:
            self.sent.add(key)
            call.events.put(("tokens", (choice, ids, logprobs)))

        self._put(GenRequest(key, req.prompt_ids, params, on_tokens=on_tokens if req.stream else None,
                             tenant=h.headers.get(TENANT_HEADER, "")))
        try:
            if req.stream:
                self._stream(h, call, texts, req.include_usage, params.logprobs is not None)
            else:
                self._reply(h, call)
        except (BrokenPipeError, ConnectionResetError):
            if not call.finished:          # the caller left: the engine drops the request at its next step
                self.lane.cancel(key)
        finally:
            self._done(key)
            log.debug("interactive %d: %.1f ms", key, (time.perf_counter() - t0) * 1e3)

    def _serve_api(self, h: BaseHTTPRequestHandler, req: GenRequest, streaming: bool, body: RequestBody) -> None:
        """/v1/embeddings and /v1/responses (blendserve/worker/interactive_api.py): the same lane, their own answers."""
        call = self.calls[req.key] = Call(req.key, h.path)
        if streaming:
            def on_tokens(ids: list[int], choice: int = 0, logprobs: list | None = None) -> None:
                self.sent.add(call.key)
                call.events.put(("tokens", (ids, logprobs)))

            req = dataclasses.replace(req, on_tokens=on_tokens)
        self._put(dataclasses.replace(req, tenant=h.headers.get(TENANT_HEADER, "")))
        try:
            if streaming:
                interactive_api.stream(h, call, body, self.model_name, self.tokenizer)
            else:
                interactive_api.reply(h, call, body, self.model_name)
        except (BrokenPipeError, ConnectionResetError):
            if not call.finished:          # the caller left: the engine drops the request at its next step
                self.lane.cancel(req.key)
        finally:
            self._done(req.key)

    def _put(self, request: GenRequest) -> None:
        self.requests[request.key] = request
        self.lane.put(request)

    def _done(self, key: int) -> None:
        del self.calls[key]
        self.requests.pop(key, None)
        self.sent.discard(key)

    def _reply(self, h: BaseHTTPRequestHandler, call: Call) -> None:
        kind, value = call.next(h)
        while kind == "tokens":
            kind, value = call.next(h)
        if kind == "error":
            return send_json(h, 503, error_body(value, "worker_stopping", None, "server_error"))
        if kind == "failed":
            return send_json(h, *interactive_api.failed(value))
        value.fingerprint = value.fingerprint or self.fingerprint
        send_json(h, 200, response_body(call.endpoint, self.model_name, value, call.tool))

    def _stream(self, h: BaseHTTPRequestHandler, call: Call, texts: list[TextStream], include_usage: bool,
                logprobs: bool) -> None:
        """Server-sent chunks, OpenAI's way (worker/sse.py), as the engine's tokens come."""
        out = ChunkStream(h, call.endpoint, self.model_name, self.fingerprint, call.tool, len(texts),
                          include_usage, logprobs)
        out.begin()
        while True:
            kind, value = call.next(h)
            if kind == "tokens":
                i, ids, entries = value if isinstance(value, tuple) else (0, value, None)
                out.tokens(i, texts[i].add(ids), entries)
            elif kind in ("error", "failed"):
                return out.error(value if kind == "error" else value.error)
            else:
                return out.finish(value, texts)


