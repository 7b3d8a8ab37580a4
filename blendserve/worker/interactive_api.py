"""The worker's interactive /v1/embeddings and /v1/responses: checked, run ahead of batch work, answered.

They ride the same lane as chat and completions (blendserve/worker/interactive.py): the
body is parsed into its endpoint's request model, with the rules a batch line meets
(blendserve/protocol/requests.py), tokenized, and put in the lane; the engine runs it at
its next step (the embedding engine: between two sub-batches). Embeddings
answer one JSON body. A Response answers one JSON body, or with `stream: true`
the Responses API's server-sent events (`event: <type>` and `data: <json>`,
each numbered; no `[DONE]`, as OpenAI ends these streams).
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from blendserve.protocol import embeddings, response_object, responses_api
from blendserve.protocol.fields import BodyError
from blendserve.protocol.requests import EmbeddingRequest, RequestBody, ResponsesRequest, parse
from blendserve.protocol.results import output_logprobs, result_body
from blendserve.worker.engines.base import GenRequest, GenResult
from blendserve.worker.http_io import Call, TextStream, error_body, send_json

if TYPE_CHECKING:
    from http.server import BaseHTTPRequestHandler

    from blendserve.protocol.fields import ModelInfo
    from blendserve.worker.lane import Lane

ENDPOINTS = (embeddings.ENDPOINT, responses_api.ENDPOINT)


def prepare(info: ModelInfo, lane: Lane, path: str, body: Any) -> tuple[GenRequest, RequestBody, bool]:
    """The engine request for a body, the body parsed into its endpoint's model, and whether it streams.
    Raises BodyError (a 400)."""
    if path != embeddings.ENDPOINT and info.task == "embed":
        raise BodyError("invalid_value", f"'{info.name}' is an embedding model: it serves only "
                        f"{embeddings.ENDPOINT}.", "model")
    req = parse(path, body, info, interactive=True)
    if isinstance(req, EmbeddingRequest):
        inputs = req.inputs
        ids = embeddings.join(inputs.ids if inputs.ids is not None else info.encode(inputs.texts))
        if (err := embeddings.context_error(ids, info)) is not None:
            raise err
        return GenRequest(lane.new_key(), ids, req.sampling_params()), req, False
    assert isinstance(req, ResponsesRequest)
    ids = info.encode([info.render_chat(req.chat)])[0]
    mt = req.max_output
    if len(ids) + (mt or 1) > info.context_length:
        raise BodyError("context_length_exceeded", f"The input ({len(ids)} tokens) plus max_output_tokens ({mt}) "
                        f"exceeds the model's context length of {info.context_length} tokens.", "input")
    mt = mt if mt is not None else info.context_length - len(ids)
    return GenRequest(lane.new_key(), ids, req.sampling_params(mt)), req, bool(req.stream)


def failed(result: GenResult) -> tuple[int, dict]:
    """The status and body of a call that failed alone (GenResult.error): a 400 where its own input is at
    fault, else a 500 (not a 503: the API would send the same request on to the next worker)."""
    if result.refused:
        return 400, error_body(result.error or "", "invalid_value", None)
    return 500, error_body(result.error or "", "engine_error", None, "server_error")


def reply(h: BaseHTTPRequestHandler, call: Call, body: RequestBody, model_name: str) -> None:
    """The whole answer as one JSON body once the engine finished it."""
    kind, value = call.next(h)
    while kind == "tokens":
        kind, value = call.next(h)
    if kind == "error":
        return send_json(h, 503, error_body(value, "worker_stopping", None, "server_error"))
    if kind == "failed":
        return send_json(h, *failed(value))
    send_json(h, 200, result_body(model_name, value, body))


def stream(h: BaseHTTPRequestHandler, call: Call, body: ResponsesRequest, model_name: str, tokenizer: Any) -> None:
    """The Responses API's events: the opening ones, a delta per run of new text (with its tokens' logprobs
    when asked), the closing ones."""
    events = response_object.EventStream(body.params(), model_name, body.tool_call())
    text = TextStream(tokenizer, ())
    pending: list = []      # the logprobs of tokens whose text has not gone out yet

    def send(items: list[tuple[str, dict]]) -> None:
        for kind, ev in items:
            h.wfile.write(f"event: {kind}\ndata: ".encode() + json.dumps(ev).encode() + b"\n\n")
        h.wfile.flush()

    h.send_response(200)
    h.send_header("Content-Type", "text/event-stream")
    h.send_header("Cache-Control", "no-cache")
    h.end_headers()
    send(events.opening())
    while True:
        kind, value = call.next(h)
        if kind == "tokens":
            ids, logprobs = value
            pending += logprobs or ()
            if delta := text.add(ids):
                send(events.delta(delta, output_logprobs(pending)))
                pending = []
        elif kind in ("error", "failed"):
            send([events.error(value if kind == "error" else value.error)])
            return
        else:
            if rest := text.close(value.text):
                send(events.delta(rest, output_logprobs(pending)))
            send(events.closing(value.text, value.finish_reason, value.prompt_tokens, value.cached_tokens,
                                value.completion_tokens, output_logprobs(value.logprobs)))
            return
