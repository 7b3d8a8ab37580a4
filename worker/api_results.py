"""Engine results of /v1/embeddings and /v1/responses requests to the bodies those endpoints return.

Both echo parts of their request (an embedding's encoding_format; a Response's
instructions, metadata and sampling settings), so unlike chat and completions
results (worker/responses.py) they are built from the result and the request's
body together, in the batch writer and in the interactive endpoint alike.
"""
from __future__ import annotations

import time

from core import embeddings, responses_api
from worker.engines.base import GenResult

ENDPOINTS = (embeddings.ENDPOINT, responses_api.ENDPOINT)


def embedding_body(model: str, res: GenResult, body: dict) -> dict:
    return embeddings.response_body(model, res.vectors, res.prompt_tokens, body.get("encoding_format") or "float")


def responses_body(model: str, res: GenResult, body: dict) -> dict:
    resp_id, msg_id = responses_api.new_ids()
    return responses_api.finished(body, model, resp_id, msg_id, int(time.time()), res.text, res.finish_reason,
                                  res.prompt_tokens, res.cached_tokens, res.completion_tokens)


def result_body(endpoint: str, model: str, res: GenResult, body: dict) -> dict:
    """The body of one of ENDPOINTS for a finished request; `body`: the request's (less its input)."""
    if endpoint == embeddings.ENDPOINT:
        return embedding_body(model, res, body)
    return responses_body(model, res, body)
