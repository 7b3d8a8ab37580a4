"""What the worker's interactive HTTP threads share: a call in flight, JSON answers and OpenAI's error
body, and token ids turned into text deltas for a stream."""
from __future__ import annotations

import json
import queue
import select
import socket
from http.server import BaseHTTPRequestHandler
from typing import Any

from blendserve.protocol.structured import ToolCall


class Call:
    """One interactive request in flight: the engine thread puts tokens and the result, its HTTP thread reads."""

    def __init__(self, key: int, endpoint: str, tool: ToolCall | None = None) -> None:
        self.key, self.endpoint, self.finished, self.tool = key, endpoint, False, tool
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()

    def next(self, h: BaseHTTPRequestHandler) -> tuple[str, Any]:
        """The next event; raises ConnectionResetError if the caller hung up while it waited."""
        while True:
            try:
                return self.events.get(timeout=0.05)
            except queue.Empty:
                if hung_up(h.connection):
                    raise ConnectionResetError from None


class TextStream:
    """Token ids in, text deltas out, never beyond a stop string nor into an unfinished UTF-8 character.

    Each run of new tokens is decoded on its own (a byte-level BPE decodes
    piecewise), and held back while it ends inside a character; the last
    len(longest stop) - 1 characters are held back too, since they may begin a
    stop string. The final result's text (stop string removed) closes the stream.
    """

    def __init__(self, tokenizer, stops: tuple[str, ...]) -> None:
        self.tokenizer, self.stops = tokenizer, stops
        self.text, self.sent, self.pending = "", 0, []
        self.hold = max((len(s) for s in stops), default=1) - 1

    def add(self, ids: list[int]) -> str:
        self.pending += ids
        piece = self.tokenizer.decode(self.pending, skip_special_tokens=True)
        if piece.endswith("\ufffd"):
            return ""
        self.text += piece
        self.pending = []
        end = len(self.text) - self.hold
        for s in self.stops:
            if (at := self.text.find(s)) >= 0:
                end = min(end, at)
        return self._emit(end)

    def close(self, final: str) -> str:
        """What is left of the final text; the stream's deltas add up to exactly `final`."""
        return final[self.sent:] if final.startswith(self.text[:self.sent]) else ""

    def _emit(self, end: int) -> str:
        if end <= self.sent:
            return ""
        out, self.sent = self.text[self.sent:end], end
        return out


def hung_up(sock: socket.socket) -> bool:
    """True once the peer closed its end (readable with nothing to read)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def error_body(message: str, code: str, param: str | None, kind: str = "invalid_request_error") -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def send_json(h: BaseHTTPRequestHandler, status: int, body: dict) -> None:
    data = json.dumps(body).encode()
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)
