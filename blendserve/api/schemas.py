"""Response models: the OpenAI shapes of files, batches, models, lists and errors.

They are the routes' `response_model`s, so /openapi.json describes what the
service really returns (and FastAPI checks it on the way out); the schema
fuzzer (tests/api/test_schema_fuzz.py) holds the two to each other.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

BatchStatus = Literal["validating", "failed", "in_progress", "finalizing", "completed", "expired",
                      "cancelling", "cancelled"]


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(BaseModel):
    error: ErrorBody


class FileObject(BaseModel):
    id: str
    object: Literal["file"]
    bytes: int
    created_at: int
    expires_at: int | None
    filename: str
    purpose: Literal["batch", "batch_output"]
    status: Literal["uploaded", "processed", "error"]
    status_details: str | None


class FileList(BaseModel):
    object: Literal["list"]
    data: list[FileObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


class FileDeleted(BaseModel):
    id: str
    object: Literal["file"]
    deleted: bool


class BatchErrorItem(BaseModel):
    code: str | None = None
    message: str | None = None
    param: str | None = None
    line: int | None = None


class BatchErrors(BaseModel):
    object: Literal["list"]
    data: list[BatchErrorItem]


class RequestCounts(BaseModel):
    total: int
    completed: int
    failed: int


class InputTokensDetails(BaseModel):
    cached_tokens: int


class OutputTokensDetails(BaseModel):
    reasoning_tokens: int


class Usage(BaseModel):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class BatchObject(BaseModel):
    id: str
    object: Literal["batch"]
    endpoint: str
    model: str | None
    errors: BatchErrors | None
    input_file_id: str
    completion_window: str
    status: BatchStatus
    output_file_id: str | None
    error_file_id: str | None
    created_at: int
    in_progress_at: int | None
    expires_at: int | None
    finalizing_at: int | None
    completed_at: int | None
    failed_at: int | None
    expired_at: int | None
    cancelling_at: int | None
    cancelled_at: int | None
    request_counts: RequestCounts
    metadata: dict[str, str] | None
    usage: Usage


class BatchList(BaseModel):
    object: Literal["list"]
    data: list[BatchObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


class ModelObject(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[ModelObject]


class CompletionUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: dict[str, int] | None = None
    completion_tokens_details: dict[str, int] | None = None


class ChatMessage(BaseModel):
    role: Literal["assistant"]
    content: str | None
    refusal: str | None = None


class ChatChoice(BaseModel):
    index: int
    message: ChatMessage
    logprobs: None = None
    finish_reason: Literal["stop", "length"]


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: None = None
    finish_reason: Literal["stop", "length"]


class _Answer(BaseModel):
    """What a synchronous answer holds, in OpenAI's key order (a subclass types `object` and `choices`)."""
    id: str
    object: str
    created: int
    model: str
    choices: list[Any]
    usage: CompletionUsage
    system_fingerprint: str | None = None


class ChatCompletion(_Answer):
    """The synchronous chat answer; with `"stream": true` the same comes as `chat.completion.chunk` events."""
    object: Literal["chat.completion"]
    choices: list[ChatChoice]


class Completion(_Answer):
    object: Literal["text_completion"]
    choices: list[CompletionChoice]


class Health(BaseModel):
    status: Literal["ok"]


_ERR: dict[str, Any] = {"model": ErrorResponse}
# Every route may answer these (OpenAI's codes; request validation errors are 400, never FastAPI's 422).
ERRORS: dict[int | str, dict[str, Any]] = {400: _ERR, 401: _ERR, 404: _ERR, 409: _ERR, 413: _ERR, 500: _ERR}

# The upload route parses its multipart body itself (streamed to disk); this documents it.
UPLOAD_BODY: dict[str, Any] = {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object", "required": ["file", "purpose"], "additionalProperties": False,
    "dependentRequired": {"expires_after[anchor]": ["expires_after[seconds]"]},
    "properties": {
        "file": {"type": "string", "format": "binary"},
        "purpose": {"type": "string", "enum": ["batch"]},
        "expires_after[anchor]": {"type": "string", "enum": ["created_at"]},
        "expires_after[seconds]": {"type": "integer", "minimum": 3600, "maximum": 2592000},
    }}}}}}
