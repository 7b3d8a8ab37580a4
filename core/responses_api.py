"""/v1/responses (OpenAI's Responses API): its request rules, its translation to a chat prompt, and the
Response object and stream events as openai-python's types describe them.

Shared by batch validation (scheduler/validation.py), the scheduler's tokenizer
(core/bodies.prompt_text) and a worker, so a batch line and an interactive call
are read the same way. Pure: no database, no engine.

A Responses body is a chat in other words: `instructions` becomes the system
message, `input` (a string: one user message; or message items) the rest, and
`max_output_tokens` the chat's max_tokens; the model's chat template renders it.
Nothing is stored: `store: true` and `previous_response_id` (which reads a stored
response back) are refused with a 400 rather than silently ignored.
"""
from __future__ import annotations

import time
from typing import Any

from core.fields import BodyError, check_int, check_messages, check_number
from core.ids import new_id
from core.structured import schema_constraint

ENDPOINT = "/v1/responses"
# Applied, or describing the caller (no effect on the output): accepted.
APPLIED = {"model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "text", "metadata",
           "stream", "stream_options"}
DESCRIPTIVE = {"user", "safety_identifier", "prompt_cache_key", "service_tier", "parallel_tool_calls",
               "max_tool_calls", "prompt_cache_retention"}
# Refused unless null, false, empty or the default: what each would ask for that is not done here.
UNSUPPORTED = {
    "previous_response_id": "responses are not stored here, so none can be continued; send the whole "
                            "conversation in 'input'",
    "store": "responses are not stored here; send 'store': false or leave it out",
    "conversation": "conversations are not stored here; send the whole conversation in 'input'",
    "background": "background responses are not supported; use a batch for work that may wait",
    "tools": "tool calling is not supported on /v1/responses", "tool_choice": "tool calling is not supported",
    "reasoning": "the served models do not reason", "include": "no additional output data is available",
    "top_logprobs": "logprobs are not supported on /v1/responses", "prompt": "stored prompt templates are not "
    "supported", "truncation": "only 'disabled' truncation is supported (a prompt that does not fit is a 400)",
}
DEFAULTS = {"tool_choice": "auto", "truncation": "disabled", "reasoning": {}}
KNOWN = APPLIED | DESCRIPTIVE | UNSUPPORTED.keys()
TEXT_PARTS = ("input_text", "output_text", "text")
METADATA_KEYS, METADATA_KEY_LEN, METADATA_VALUE_LEN = 16, 64, 512


def _asks_nothing(key: str, v: Any) -> bool:
    return v is None or v is False or v == [] or v == "" or v == {} or (type(v) is int and v == 0) \
        or DEFAULTS.get(key) == v or (key == "reasoning" and isinstance(v, dict) and not any(v.values())) \
        or (key == "tool_choice" and v == "none")


def check_text(text: Any) -> None:
    """`text`: {"format": ...}: text (the default), `json_schema` (OpenAI's strict subset) or `json_object`,
    checked and later applied by the machinery chat's `response_format` uses (core/structured.py); `verbosity`
    only at its default."""
    if text is None:
        return
    if not isinstance(text, dict) or not text.keys() <= {"format", "verbosity"}:
        raise BodyError("invalid_value", "'text' must be an object with 'format' (and 'verbosity').", "text")
    schema_constraint(text.get("format"), "text.format")
    if text.get("verbosity") not in (None, "medium"):
        raise BodyError("unsupported_value", "'text.verbosity' is not supported (only 'medium').", "text.verbosity")


def chat_params(body: dict) -> dict:
    """The sampling settings of a Responses body in chat's words, for worker.responses.sampling_params:
    `text.format` is chat's `response_format` (core.structured reads either shape)."""
    fmt = (body.get("text") or {}).get("format")
    return {"temperature": body.get("temperature"), "top_p": body.get("top_p"),
            **({"response_format": fmt} if fmt is not None else {})}


def check_metadata(metadata: Any) -> None:
    """OpenAI's metadata: at most 16 string pairs, keys up to 64 characters, values up to 512."""
    if metadata is None:
        return
    if not isinstance(metadata, dict) or len(metadata) > METADATA_KEYS or not all(
            isinstance(k, str) and isinstance(v, str) and len(k) <= METADATA_KEY_LEN and len(v) <= METADATA_VALUE_LEN
            for k, v in metadata.items()):
        raise BodyError("invalid_value", f"'metadata' must be an object of at most {METADATA_KEYS} string pairs, "
                        f"keys of at most {METADATA_KEY_LEN} characters and values of at most {METADATA_VALUE_LEN}.",
                        "metadata")


def check_params(body: Any) -> int | None:
    """Every rule but the input's; returns max_output_tokens (None: the rest of the context). Raises BodyError."""
    if not isinstance(body, dict):
        raise BodyError("invalid_value", "The request body must be a JSON object.")
    unknown = sorted(body.keys() - KNOWN)
    if unknown:
        raise BodyError("unsupported_parameter", f"Unrecognized request argument supplied: '{unknown[0]}'.", unknown[0])
    for key in sorted(UNSUPPORTED.keys() & body.keys()):
        if not _asks_nothing(key, body[key]):
            raise BodyError("unsupported_parameter", f"'{key}': {UNSUPPORTED[key]}.", key)
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise BodyError("invalid_value", "'instructions' must be a string.", "instructions")
    check_number(body, "temperature", 0.0, 2.0)
    check_number(body, "top_p", 0.0, 1.0)
    check_text(body.get("text"))
    check_metadata(body.get("metadata"))
    return check_int(body, "max_output_tokens", 1)


def _item_text(item: dict, p: str) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BodyError("invalid_value", f"'{p}.content' must be a string or an array of content parts.",
                        f"{p}.content")
    out = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in TEXT_PARTS:
            raise BodyError("unsupported_value", f"'{p}.content[{j}]': only text parts ({', '.join(TEXT_PARTS)}) "
                            f"are supported, got {kind!r}.", f"{p}.content[{j}]")
        if not isinstance(part.get("text"), str):
            raise BodyError("invalid_value", f"'{p}.content[{j}].text' must be a string.", f"{p}.content[{j}].text")
        out.append(part["text"])
    return "".join(out)


def chat_messages(body: dict) -> list[dict]:
    """The chat the model sees: `instructions` as the system message, then `input` (a string is one user
    message; message items keep their roles, `developer` read as `system`). Raises BodyError."""
    inp = body.get("input")
    if isinstance(inp, str):
        if not inp:
            raise BodyError("invalid_value", "'input' must not be empty.", "input")
        items = [{"role": "user", "content": inp}]
    elif isinstance(inp, list) and inp:
        items = []
        for i, item in enumerate(inp):
            p = f"input[{i}]"
            if not isinstance(item, dict):
                raise BodyError("invalid_value", f"'{p}' must be an object.", p)
            kind = item.get("type", "message")
            if kind != "message":
                raise BodyError("unsupported_value", f"'{p}.type': only message items are supported, got {kind!r}.",
                                f"{p}.type")
            items.append({"role": item.get("role"), "content": _item_text(item, p)})
    else:
        raise BodyError("invalid_value", "'input' must be a non-empty string or an array of message items.", "input")
    if body.get("instructions"):
        items.insert(0, {"role": "system", "content": body["instructions"]})
    try:
        return check_messages(items)
    except BodyError as e:      # name the Responses field, not the chat one
        e.param = (e.param or "").replace("messages", "input")
        e.message = e.message.replace("'messages", "'input")
        raise


def check_responses(body: Any) -> tuple[list[dict], int | None]:
    """A whole Responses body: its chat messages and its max_output_tokens. Raises BodyError."""
    mt = check_params(body)
    return chat_messages(body), mt


# -- the Response object and its stream events ---------------------------------------------------------


def new_ids() -> tuple[str, str]:
    """A response's id and its output message's id."""
    return new_id("resp_"), new_id("msg_")


def message_item(msg_id: str, text: str | None, status: str) -> dict:
    content = [] if text is None else [output_text(text)]
    return {"id": msg_id, "type": "message", "role": "assistant", "status": status, "content": content}


def output_text(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def usage(input_tokens: int, cached_tokens: int, output_tokens: int) -> dict:
    return {"input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": cached_tokens, "cache_write_tokens": 0},
            "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens}


def response_object(body: dict, model: str, resp_id: str, created_at: int, status: str = "in_progress",
                    output: list[dict] | None = None, use: dict | None = None) -> dict:
    """The Response, echoing the request's settings as OpenAI does; `status` in_progress (no output yet),
    completed or incomplete (max_output_tokens reached)."""
    text = body.get("text") or {}
    return {
        "id": resp_id, "object": "response", "created_at": created_at, "status": status,
        "completed_at": int(time.time()) if status in ("completed", "incomplete") else None,
        "background": False, "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": body.get("max_tool_calls"), "model": model, "output": output or [],
        "parallel_tool_calls": body.get("parallel_tool_calls", True), "previous_response_id": None,
        "prompt_cache_key": body.get("prompt_cache_key"), "reasoning": {"effort": None, "summary": None},
        "safety_identifier": body.get("safety_identifier"), "service_tier": body.get("service_tier") or "default",
        "store": False, "temperature": body.get("temperature", 1.0), "top_p": body.get("top_p", 1.0),
        "text": {"format": text.get("format") or {"type": "text"}, "verbosity": text.get("verbosity") or "medium"},
        "tool_choice": "auto", "tools": [], "top_logprobs": 0, "truncation": "disabled",
        "usage": use, "user": body.get("user"), "metadata": body.get("metadata") or {},
    }


def finished(body: dict, model: str, resp_id: str, msg_id: str, created_at: int, text: str, finish_reason: str,
             input_tokens: int, cached_tokens: int, output_tokens: int) -> dict:
    """The final Response: one assistant message with the output text; `incomplete` when max_output_tokens
    ended it (OpenAI's status and incomplete_details for a cut-off answer)."""
    status = "incomplete" if finish_reason == "length" else "completed"
    return response_object(body, model, resp_id, created_at, status,
                           [message_item(msg_id, text, status)], usage(input_tokens, cached_tokens, output_tokens))


class EventStream:
    """The server-sent events of a streamed response, in OpenAI's order, each numbered (`sequence_number`):
    response.created, response.in_progress, response.output_item.added, response.content_part.added,
    response.output_text.delta..., response.output_text.done, response.content_part.done,
    response.output_item.done, then response.completed (or response.incomplete)."""

    def __init__(self, body: dict, model: str) -> None:
        self.body, self.model = body, model
        self.resp_id, self.msg_id = new_ids()
        self.created_at, self.seq = int(time.time()), 0

    def _event(self, kind: str, **fields: Any) -> tuple[str, dict]:
        ev = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return kind, ev

    def opening(self) -> list[tuple[str, dict]]:
        resp = response_object(self.body, self.model, self.resp_id, self.created_at)
        at = {"item_id": self.msg_id, "output_index": 0, "content_index": 0}
        return [self._event("response.created", response=resp),
                self._event("response.in_progress", response=resp),
                self._event("response.output_item.added", output_index=0,
                            item=message_item(self.msg_id, None, "in_progress")),
                self._event("response.content_part.added", **at, part=output_text(""))]

    def delta(self, text: str) -> tuple[str, dict]:
        return self._event("response.output_text.delta", item_id=self.msg_id, output_index=0, content_index=0,
                           delta=text, logprobs=[])

    def closing(self, text: str, finish_reason: str, input_tokens: int, cached_tokens: int,
                output_tokens: int) -> list[tuple[str, dict]]:
        resp = finished(self.body, self.model, self.resp_id, self.msg_id, self.created_at, text, finish_reason,
                        input_tokens, cached_tokens, output_tokens)
        at = {"item_id": self.msg_id, "output_index": 0, "content_index": 0}
        return [self._event("response.output_text.done", **at, text=text, logprobs=[]),
                self._event("response.content_part.done", **at, part=output_text(text)),
                self._event("response.output_item.done", output_index=0, item=resp["output"][0]),
                self._event(f"response.{resp['status']}", response=resp)]

    def error(self, message: str, code: str = "server_error") -> tuple[str, dict]:
        return self._event("error", code=code, message=message, param=None)
