"""/v1/embeddings: forwarded to a live worker of the model, as chat and completions are.

The worker (blendserve/worker/interactive_api.py) checks the body with the batch rules
(blendserve/protocol/embeddings.py), runs it at its embedding engine's next sub-batch, ahead
of batch work, and answers OpenAI's CreateEmbeddingResponse.
"""
from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel

from blendserve.api.deps import OwnerDep, StateDep
from blendserve.api.routes.completions import _forward
from blendserve.api.schemas import ERRORS

router = APIRouter(tags=["embeddings"])

_TEXTS = {"oneOf": [{"type": "string", "minLength": 1},
                    {"type": "array", "minItems": 1, "maxItems": 2048, "items": {"type": "string", "minLength": 1}},
                    {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}},
                    {"type": "array", "minItems": 1, "maxItems": 2048,
                     "items": {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}}}]}
_REQUEST_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "required": ["model", "input"], "additionalProperties": False,
    "properties": {"model": {"type": "string", "minLength": 1}, "input": _TEXTS,
                   "encoding_format": {"enum": ["float", "base64"]}, "dimensions": {"type": "integer", "minimum": 1},
                   "user": {"type": "string"}}}}}}}


class Embedding(BaseModel):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str        # str: base64 of little-endian float32 (encoding_format "base64")


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(BaseModel):
    """OpenAI's CreateEmbeddingResponse: one vector per input, in input order."""
    object: Literal["list"]
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage


@router.post("/v1/embeddings", response_model=EmbeddingList, responses={**ERRORS, 503: ERRORS[400]},
             openapi_extra=_REQUEST_BODY)
async def create_embeddings(request: Request, st: StateDep, _: OwnerDep) -> Response:
    return await _forward(request, st, "/v1/embeddings")
