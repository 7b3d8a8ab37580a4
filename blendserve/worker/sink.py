"""Where an engine's results go: a batch request's result or error line to the process's writer thread
(blendserve/worker/writes.py), settled against its chunk once written; an interactive one to its caller.

The engine never waits on the database: results of all ranks are written many to a transaction, each with
a guard on the request's status, so every custom_id comes out exactly once.
"""
from __future__ import annotations

import logging

from blendserve.protocol import results
from blendserve.protocol.body import RequestBody
from blendserve.worker.engines.base import GenResult
from blendserve.worker.interactive import InteractiveServer
from blendserve.worker.lane import Share
from blendserve.worker.ledger import Ledger
from blendserve.worker.writes import ResultWriter

log = logging.getLogger("blendserve.worker")


class ResultSink:
    """One rank's results, with what each batch request's answer needs beyond the result itself."""

    def __init__(self, worker_id: str, model: str, fingerprint: str, writer: ResultWriter, ledger: Ledger,
                 share: Share, interactive: InteractiveServer | None) -> None:
        self.worker_id, self.model, self.fingerprint = worker_id, model, fingerprint
        self.writer, self.ledger, self.share, self.interactive = writer, ledger, share, interactive
        self.requests: dict[int, RequestBody] = {}   # request id -> its typed body: what its answer echoes

    def expect(self, key: int, request: RequestBody) -> None:
        """The request whose answer will come: its tool call shapes the answer, its settings are echoed
        (an embedding's encoding_format, a Response's instructions and sampling settings)."""
        self.requests[key] = request

    def forget(self, key: int) -> None:
        self.requests.pop(key, None)

    def clear(self) -> None:
        self.requests.clear()

    def write(self, res: GenResult) -> None:
        if res.error is not None:       # refused by the engine: this request fails alone, the stream runs on
            if res.key < 0:
                if self.interactive is not None:
                    self.interactive.finish(res)    # a 400 or a 500 of its own (InteractiveServer.finish)
            elif (meta := self.ledger.meta.pop(res.key, None)) is not None:
                self.failed(meta[0], res.key, res.error, counted=True)
            return
        self.share.add(res.prompt_tokens + res.completion_tokens, interactive=res.key < 0)
        if res.key < 0:
            if self.interactive is not None:
                self.interactive.finish(res)
            return
        cid, _, endpoint = self.ledger.meta.pop(res.key)
        self.writer.put(self.worker_id, {"b_id": res.key, "b_status": "completed",
                                         "b_response": self._response(endpoint, res), "b_error": None,
                                         "b_out": res.completion_tokens, "b_cached": res.cached_tokens},
                        lambda: self.ledger.settled(cid))

    def failed(self, cid: int, key: int, message: str, counted: bool = False) -> None:
        """The request fails alone, with its own error line (written in order with the results); `counted`:
        its chunk already owes it."""
        if not counted:
            self.ledger.owe(cid)
        log.warning("request %d failed: %s", key, message)
        self.writer.put(self.worker_id, {"b_id": key, "b_status": "failed", "b_response": None,
                                         "b_error": {"code": "server_error", "message": message},
                                         "b_out": 0, "b_cached": 0},
                        lambda: self.ledger.settled(cid))

    def drain(self) -> None:
        """Wait until every result put so far is written."""
        self.writer.drain(self.worker_id)

    def _response(self, endpoint: str, res: GenResult) -> dict:
        res.fingerprint = res.fingerprint or self.fingerprint
        request = self.requests.pop(res.key, None)
        if request is None:             # not expected (cannot happen): the endpoint's plain answer
            return results.response_body(endpoint, self.model, res)
        return results.result_body(self.model, res, request)
