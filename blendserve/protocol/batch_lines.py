"""A finished request as the line its batch's output or error file holds.

Finalization (blendserve/scheduler/lifecycle.py) writes the output and error files with `line`, and
GET /v1/batches/{id}/output (blendserve/api/routes/outputs.py) serves a running batch's finished requests
with it: a completed one as its output-file line, any other as its error-file line. Only the random `id`
and `request_id` differ between two writes of the same request.

Lines are pure ASCII (json.dumps' default), as in the files: model text may hold U+2028, U+0085 and the
like, which str.splitlines() and many JSONL readers treat as line breaks.
"""
from __future__ import annotations

import json

from blendserve.core.ids import new_id

# Failures with no HTTP answer: the batch ended first, or the service failed. Every other failure is the
# request's own (its body, its prompt's length, its model), which OpenAI writes as the endpoint's 4xx answer.
BATCH_LEVEL = {"batch_expired", "batch_cancelled", "server_error", "file_not_found"}
_STATUS = {"model_not_found": 404}


def line(custom_id: str, status: str, response: str | None, error: str | None) -> bytes:
    """One JSONL line (with its newline) from a request row's custom_id, status and the stored JSON text of
    its response and error columns."""
    head = b'{"id": "%s", "custom_id": %s, ' % (new_id("batch_req_").encode(), json.dumps(custom_id).encode())
    if status == "completed":
        return head + b'"response": {"status_code": 200, "request_id": "%s", "body": %s}, "error": null}\n' % (
            new_id("req_").encode(), ascii_text(response))
    return head + failure(error) + b"}\n"


def failure(stored: str | None) -> bytes:
    """An error line's `response` and `error`: request-level failures as OpenAI writes them (`response` with
    its status code and `body.error`, `error` null), the rest in `error` with no response."""
    err = json.loads(stored) if stored else {}
    code = err.get("code")
    if not code or code in BATCH_LEVEL:
        return b'"response": null, "error": %s' % ascii_text(stored)
    body = {"error": {"message": err.get("message", ""), "type": "invalid_request_error",
                      "param": err.get("param"), "code": code}}
    return b'"response": {"status_code": %d, "request_id": "%s", "body": %s}, "error": null' % (
        _STATUS.get(code, 400), new_id("req_").encode(), json.dumps(body).encode())


def ascii_text(stored: str | None) -> bytes:
    """A JSON column's stored text, spliced into the line as it is (no parse and re-dump per line); text that
    is not pure ASCII or not one line goes through json.dumps."""
    if stored is None:
        return b"null"
    if stored.isascii() and "\n" not in stored and "\r" not in stored:
        return stored.encode()
    return json.dumps(json.loads(stored)).encode()
