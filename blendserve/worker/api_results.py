"""Engine results of /v1/embeddings and /v1/responses requests to the bodies those endpoints return.

Both echo parts of their request (an embedding's encoding_format; a Response's
instructions, metadata and sampling settings), so unlike chat and completions
results they are built from the result and the request's stored parameters
together (blendserve/protocol/results.py builds them from the typed request).
"""
from __future__ import annotations

from blendserve.protocol import embeddings, responses_api, results
from blendserve.protocol.requests import stored
from blendserve.protocol.results import Generated

ENDPOINTS = (embeddings.ENDPOINT, responses_api.ENDPOINT)


def result_body(endpoint: str, model: str, res: Generated, body: dict) -> dict:
    """The body of one of ENDPOINTS for a finished request; `body`: the request's stored parameters."""
    return results.result_body(model, res, stored(endpoint, body))
