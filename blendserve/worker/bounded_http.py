"""The worker's interactive HTTP server with a bound on its threads: one thread per connection, at most
MAX_CONNECTIONS at once; one more is answered 503 at once (the API tries its next worker) and closed. A
connection's request line and headers must arrive within HEAD_TIMEOUT_S, or its thread is given back; the
body and the answer have no time limit (a generation may take minutes).

The API is the only caller and its pool bounds what it opens
(BLENDSERVE_LIMIT_POOL_SIZE per API process), so the bound is there for
several API replicas together and for anything else that reaches the port.
"""
from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_CONNECTIONS = 1024
HEAD_TIMEOUT_S = 10.0

_BUSY = json.dumps({"error": {"message": "The worker has too many connections open.", "type": "server_error",
                              "param": None, "code": "worker_busy"}}).encode()


class BoundedHTTPServer(ThreadingHTTPServer):
    # The listen backlog: connections the kernel completes before the accept loop (one thread, sharing the
    # interpreter with the engine's loop) takes them. With socketserver's 5, a burst of the API's calls waits
    # for SYN retries, past the API's 2-s connect timeout, and the caller gets a 503.
    request_queue_size = MAX_CONNECTIONS

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 max_connections: int = MAX_CONNECTIONS, head_timeout_s: float = HEAD_TIMEOUT_S) -> None:
        super().__init__(address, _timed(handler, head_timeout_s))
        self.slots = threading.BoundedSemaphore(max_connections)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            try:
                request.sendall(b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                                b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(_BUSY), _BUSY))
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: socket.socket, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


def _timed(handler: type[BaseHTTPRequestHandler], head_timeout_s: float) -> type[BaseHTTPRequestHandler]:
    """The handler with a socket timeout while its head is read (the standard library closes the connection
    when it passes), and none once the head is in."""

    class Timed(handler):               # type: ignore[misc, valid-type]
        timeout = head_timeout_s

        def parse_request(self) -> bool:
            ok = super().parse_request()          # reads the headers
            self.connection.settimeout(None)
            return ok

    return Timed
