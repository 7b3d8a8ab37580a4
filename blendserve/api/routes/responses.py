"""/v1/responses (OpenAI's Responses API): forwarded to a live worker of the model, plain or streamed.

The worker (blendserve/worker/interactive_api.py) checks the body with the batch rules
(blendserve/protocol/responses_api.py), runs it ahead of batch work, and answers the Response
object, or its server-sent events with `"stream": true`. Nothing is stored, so
there is no GET /v1/responses/{id}; `store: true` and `previous_response_id`
are refused (400).
"""
from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel

from blendserve.api.deps import OwnerDep, StateDep
from blendserve.api.routes.completions import _RESPONSES, _forward

router = APIRouter(tags=["responses"])

# The fields this service reads; the others OpenAI defines are accepted where they ask for nothing
# (blendserve/protocol/responses_api.py), so the schema leaves additional properties open.
_REQUEST_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "required": ["model", "input"],
    "properties": {"model": {"type": "string", "minLength": 1},
                   "input": {"oneOf": [{"type": "string", "minLength": 1},
                                       {"type": "array", "minItems": 1, "items": {"type": "object"}}]},
                   "instructions": {"type": ["string", "null"]},
                   "max_output_tokens": {"type": ["integer", "null"], "minimum": 1},
                   "temperature": {"type": ["number", "null"], "minimum": 0, "maximum": 2},
                   "top_p": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
                   "stream": {"type": ["boolean", "null"]},
                   "metadata": {"type": ["object", "null"], "maxProperties": 16, "propertyNames": {"maxLength": 64},
                                "additionalProperties": {"type": "string", "maxLength": 512}}}}}}}}


class OutputText(BaseModel):
    type: Literal["output_text"]
    text: str
    annotations: list[Any]


class OutputMessage(BaseModel):
    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    status: Literal["in_progress", "completed", "incomplete"]
    content: list[OutputText]


class InputTokensDetails(BaseModel):
    cached_tokens: int
    cache_write_tokens: int


class OutputTokensDetails(BaseModel):
    reasoning_tokens: int


class ResponseUsage(BaseModel):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class ResponseObject(BaseModel):
    """The Response as openai-python's `Response` type describes it (the fields this service sets)."""
    id: str
    object: Literal["response"]
    created_at: int
    status: Literal["completed", "incomplete", "in_progress"]
    model: str
    output: list[OutputMessage]
    instructions: str | None = None
    max_output_tokens: int | None = None
    metadata: dict[str, str]
    temperature: float | None = None
    top_p: float | None = None
    incomplete_details: dict[str, str] | None = None
    usage: ResponseUsage | None = None


@router.post("/v1/responses", response_model=ResponseObject, responses=_RESPONSES, openapi_extra=_REQUEST_BODY)
async def create_response(request: Request, st: StateDep, _: OwnerDep) -> Response:
    return await _forward(request, st, "/v1/responses")
