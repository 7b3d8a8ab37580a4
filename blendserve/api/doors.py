"""The API's HTTP protocol: uvicorn's httptools protocol with bounds on a request's head, checked before parsing.

httptools has no limit of its own: it gathers a header line of any length
(200 MB of one header took 285 MB of memory and 43 CPU-seconds, joined piece
by piece, before the front door could answer 401), and a client may take as
long as it likes to finish its headers. Here every chunk the socket delivers
while a head is incomplete is counted before the parser sees it: past
BLENDSERVE_LIMIT_HEADER_BYTES, or past BLENDSERVE_LIMIT_HEADER_COUNT lines, the
answer is 431 and the connection is closed, so the API holds one read (256 KiB)
of the head at most. A head still incomplete BLENDSERVE_LIMIT_HEADER_TIMEOUT_S
after its first byte (or after the connection opened) gets 408 and the
connection closed. The rest of the protocol is httptools' own: a status poll
costs the same CPU as before (h11 costs a third more per request).
"""
from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from blendserve.core.limit_settings import LimitSettings

_END = (b"\r\n\r\n", b"\n\n")      # where a head ends (llhttp also takes bare line feeds)


class GuardedHttpTools(HttpToolsProtocol):
    """HttpToolsProtocol that refuses an oversized or slow request head; the limits are class attributes, set
    by `protocol` for one server."""
    head_bytes_max = 64 * 1024
    head_lines_max = 101
    head_timeout_s = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True          # bytes arriving now belong to a request's head (as counted here)
        self._parsed_head = False     # the parser has the current request's whole head
        self._head_bytes = 0
        self._head_lines = 0
        self._tail = b""              # the head's last bytes, for an end marker split across two reads
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:   # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._in_head and not self._count(data):
            return
        super().data_received(data)
        if not self._parsed_head and not self.transport.is_closing():
            self._arm()               # a head begun and not finished: the clock runs (a whole one costs no timer)

    def on_message_begin(self) -> None:
        self._parsed_head = False
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._in_head, self._parsed_head = False, True
        self._disarm()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head, self._head_bytes, self._head_lines, self._tail = True, 0, 0, b""

    def _count(self, data: bytes) -> bool:
        """Count a read of a head; False (and the connection closing with 431) once the head is over a bound."""
        seen = self._tail + data if self._tail else data
        ends = [i for i in (seen.find(m) for m in _END) if i >= 0]
        end = max(min(ends) + 1 - len(self._tail), 0) if ends else len(data)
        self._head_bytes += end
        self._head_lines += data.count(b"\n", 0, end)
        self._tail = b"" if ends else seen[-3:]
        if ends:
            self._in_head = False      # what follows is a body; the parser takes over
        if self._head_bytes > self.head_bytes_max or self._head_lines > self.head_lines_max:
            self._refuse(431, "Request header fields too large.")
            return False
        return True

    def _arm(self) -> None:
        if self._head_timer is None and self.transport is not None:
            self._head_timer = self.loop.call_later(self.head_timeout_s, self._too_slow)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _too_slow(self) -> None:
        self._head_timer = None
        if not self._parsed_head and not self.transport.is_closing():
            if self.cycle is None or self.cycle.response_complete:
                self._refuse(408, "Request headers not received in time.")
            else:
                self.transport.close()

    def _refuse(self, status: int, message: str) -> None:
        """A plain-text answer and the connection closed: nothing of this head reaches the parser or the app."""
        self._disarm()
        self._in_head = False
        body = message.encode()
        self.transport.write(b"".join([STATUS_LINE[status], b"content-type: text/plain; charset=utf-8\r\n",
                                       b"content-length: ", str(len(body)).encode(), b"\r\n",
                                       b"connection: close\r\n\r\n", body]))
        self.transport.close()


def protocol(limits: LimitSettings) -> type[GuardedHttpTools]:
    """The protocol class for uvicorn.Config(http=...), with this deployment's bounds."""
    return type("GuardedHttpTools", (GuardedHttpTools,), {
        "head_bytes_max": limits.header_bytes, "head_lines_max": limits.header_count + 1,
        "head_timeout_s": limits.header_timeout_s})
