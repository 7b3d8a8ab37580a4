"""One streamed answer as OpenAI streams it: server-sent `chat.completion.chunk` or `text_completion` chunks.

Per choice (``index``): a role delta first (chat), then text deltas, each with the log-probabilities of the
tokens it carries when asked; a forced call streams as ``tool_calls`` deltas (a named function's arguments as
they come; under "required" over several functions the whole call at the end, once its name is known); then
each choice's finish_reason, the usage chunk when asked, and ``data: [DONE]``.
"""
from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler

from blendserve.core.ids import new_id
from blendserve.protocol.results import chat_logprobs, chat_message, completion_logprobs, usage
from blendserve.protocol.structured import ToolCall
from blendserve.worker.engines.base import GenResult, TokenLogprob
from blendserve.worker.http_io import TextStream, error_body


class ChunkStream:
    def __init__(self, h: BaseHTTPRequestHandler, endpoint: str, model: str, fingerprint: str | None,
                 tool: ToolCall | None, choices: int, include_usage: bool, logprobs: bool) -> None:
        self.h, self.model, self.fingerprint = h, model, fingerprint
        self.chat = endpoint == "/v1/chat/completions"
        self.id, self.created = new_id("chatcmpl-" if self.chat else "cmpl-"), int(time.time())
        self.tool = tool if self.chat else None
        self.include_usage, self.logprobs = include_usage, logprobs
        self.offsets = [0] * choices     # completions: characters of tokens already listed, for text_offset
        # Under "required" over several functions the call's name comes last: the whole answer is held.
        self.held = self.tool is not None and self.tool.name is None

    def begin(self) -> None:
        """The headers, and each chat choice's role delta."""
        h = self.h
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Cache-Control", "no-cache")
        h.end_headers()
        if not self.chat:
            return
        tool = self.tool
        for i in range(len(self.offsets)):
            first: dict = {"role": "assistant", "content": ""}
            if tool is not None and tool.name is not None:
                first = {"role": "assistant", "content": None, "tool_calls": [
                    {"index": 0, "id": new_id("call_"), "type": "function",
                     "function": {"name": tool.name, "arguments": ""}}]}
            elif tool is not None:
                first = {"role": "assistant", "content": None}
            self._send([self._piece(i, None, delta=first)])

    def tokens(self, i: int, delta: str, entries: list[TokenLogprob] | None) -> None:
        """Choice i's new text (held back while the whole answer is held)."""
        if self.held:
            delta = ""
        if delta or (self.logprobs and entries):
            self._send([self._piece(i, delta or ("" if not self.chat else None), entries)])

    def error(self, message: str) -> None:
        stopping = error_body(message, "worker_stopping", None, "server_error")
        self.h.wfile.write(b"data: " + json.dumps(stopping).encode() + b"\n\n")

    def finish(self, result: GenResult, texts: list[TextStream]) -> None:
        """Each choice's rest and finish_reason (a held answer whole: its text, then its calls), the usage
        chunk when asked, then [DONE]."""
        for i, r in enumerate([result, *result.choices]):
            message, finish = chat_message(r, self.tool) if self.chat else ({}, r.finish_reason)
            if self.held:
                calls = message.get("tool_calls") or []
                delta = {"content": message["content"]} if message.get("content") else {}
                if calls:
                    delta["tool_calls"] = [{"index": k, **c} for k, c in enumerate(calls)]
                self._send([self._piece(i, None, delta=delta or {"content": r.text})])
            elif rest := texts[i].close(r.text):
                self._send([self._piece(i, rest)])
            self._send([self._piece(i, None if self.chat else "", finish=finish)])
        if self.include_usage:
            self._send([], use=usage(result))
        self.h.wfile.write(b"data: [DONE]\n\n")
        self.h.wfile.flush()

    def _send(self, choices: list[dict], use: dict | None = None) -> None:
        body = {"id": self.id, "object": "chat.completion.chunk" if self.chat else "text_completion",
                "created": self.created, "model": self.model, "system_fingerprint": self.fingerprint,
                "choices": choices}
        if self.include_usage:
            body["usage"] = use
        self.h.wfile.write(b"data: " + json.dumps(body).encode() + b"\n\n")
        self.h.wfile.flush()

    def _piece(self, i: int, text: str | None, entries: list[TokenLogprob] | None = None, finish: str | None = None,
               delta: dict | None = None) -> dict:
        lp = None
        if self.logprobs and entries is not None:
            lp = chat_logprobs(entries) if self.chat else completion_logprobs(entries, self.offsets[i])
            self.offsets[i] += sum(len(e.token) for e in entries if not e.token.startswith("bytes:"))
        if not self.chat:
            return {"index": i, "text": text or "", "logprobs": lp, "finish_reason": finish}
        if delta is None:
            delta = {} if text is None else (
                {"tool_calls": [{"index": 0, "function": {"arguments": text}}]} if self.tool is not None
                else {"content": text})
        return {"index": i, "delta": delta, "logprobs": lp, "finish_reason": finish}
