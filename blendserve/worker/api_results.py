"""Engine results of /v1/embeddings and /v1/responses requests to the bodies those endpoints return.

Both echo parts of their request (an embedding's encoding_format; a Response's
instructions, metadata and sampling settings), so unlike chat and completions
results (blendserve/worker/responses.py) they are built from the result and the request's
body together, in the batch writer and in the interactive endpoint alike.
"""
from __future__ import annotations

import time

from blendserve.protocol import embeddings, response_object, responses_api
from blendserve.protocol.structured import ToolCall
from blendserve.worker.engines.base import GenResult, TokenLogprob
from blendserve.worker.responses import logprob_entries, tool_call

ENDPOINTS = (embeddings.ENDPOINT, responses_api.ENDPOINT)


def embedding_body(model: str, res: GenResult, body: dict) -> dict:
    return embeddings.response_body(model, res.vectors, res.prompt_tokens, body.get("encoding_format") or "float")


def output_logprobs(entries: list[TokenLogprob] | None) -> list[dict] | None:
    """The Responses API's `output_text.logprobs`: chat's entries, or None where none were asked for."""
    return None if entries is None else logprob_entries(entries)


def response_tool(body: dict) -> ToolCall | None:
    """The call a Responses body forces (its tools in chat's words), or None."""
    return tool_call(responses_api.chat_params(body))


def responses_body(model: str, res: GenResult, body: dict) -> dict:
    resp_id, item_id = response_object.new_ids()
    return response_object.finished(body, model, resp_id, item_id, int(time.time()), res.text, res.finish_reason,
                                    res.prompt_tokens, res.cached_tokens, res.completion_tokens, response_tool(body),
                                    output_logprobs(res.logprobs))


def result_body(endpoint: str, model: str, res: GenResult, body: dict) -> dict:
    """The body of one of ENDPOINTS for a finished request; `body`: the request's (less its input)."""
    if endpoint == embeddings.ENDPOINT:
        return embedding_body(model, res, body)
    return responses_body(model, res, body)
