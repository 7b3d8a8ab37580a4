"""The Responses API's Response object and its stream events, as openai-python's types describe them.

A Response holds one output item: an assistant `message` with one `output_text`
part (its `logprobs` filled when the request included them), or, when the
request forced a tool call, a `function_call` item with the call's arguments.
Built by the batch writer and the interactive endpoint alike, so a batch result
and an interactive answer are the same object. Pure: no database, no engine.
"""
from __future__ import annotations

import time
from typing import Any

from blendserve.core.ids import new_id
from blendserve.protocol.structured import ToolCall, split_call


def new_ids() -> tuple[str, str]:
    """A response's id and its output item's id."""
    return new_id("resp_"), new_id("msg_")


def output_text(text: str, logprobs: list[dict] | None = None) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}


def message_item(item_id: str, text: str | None, status: str, logprobs: list[dict] | None = None) -> dict:
    content = [] if text is None else [output_text(text, logprobs)]
    return {"id": item_id, "type": "message", "role": "assistant", "status": status, "content": content}


def call_item(item_id: str, name: str, arguments: str, status: str) -> dict:
    """A function_call item; its call_id is what the caller's function_call_output answers."""
    return {"id": item_id.replace("msg_", "fc_", 1), "type": "function_call", "status": status, "name": name,
            "arguments": arguments, "call_id": item_id.replace("msg_", "call_", 1)}


def output_item(item_id: str, text: str, status: str, tool: ToolCall | None,
                logprobs: list[dict] | None = None) -> dict:
    """The finished output item: the forced call, or (no call forced, or none whole) the message."""
    call = split_call(tool, text) if tool is not None else None
    if call is not None:
        return call_item(item_id, *call, status)
    return message_item(item_id, text, status, logprobs)


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
        "tool_choice": body.get("tool_choice") or "auto", "tools": body.get("tools") or [],
        "top_logprobs": body.get("top_logprobs") or 0, "truncation": "disabled",
        "usage": use, "user": body.get("user"), "metadata": body.get("metadata") or {},
    }


def finished(body: dict, model: str, resp_id: str, item_id: str, created_at: int, text: str, finish_reason: str,
             input_tokens: int, cached_tokens: int, output_tokens: int, tool: ToolCall | None = None,
             logprobs: list[dict] | None = None) -> dict:
    """The final Response with its one output item; `incomplete` when max_output_tokens ended it (OpenAI's
    status and incomplete_details for a cut-off answer)."""
    status = "incomplete" if finish_reason == "length" else "completed"
    return response_object(body, model, resp_id, created_at, status,
                           [output_item(item_id, text, status, tool, logprobs)],
                           usage(input_tokens, cached_tokens, output_tokens))


def delta_logprobs(entries: list[dict]) -> list[dict]:
    """A delta event's logprobs: the output_text shape less the bytes (openai-python's delta types)."""
    return [{"token": e["token"], "logprob": e["logprob"],
             "top_logprobs": [{"token": t["token"], "logprob": t["logprob"]} for t in e["top_logprobs"]]}
            for e in entries]


class EventStream:
    """The server-sent events of a streamed response, in OpenAI's order, each numbered (`sequence_number`):
    response.created, response.in_progress, response.output_item.added, then for a message
    response.content_part.added, response.output_text.delta..., response.output_text.done and
    response.content_part.done, for a named function's call response.function_call_arguments.delta... and
    .done; then response.output_item.done and response.completed (or response.incomplete).

    A call under tool_choice "required" over several functions names its function inside the JSON the model
    writes, so its item opens only once the whole output is known."""

    def __init__(self, body: dict, model: str, tool: ToolCall | None = None) -> None:
        self.body, self.model, self.tool = body, model, tool
        self.resp_id, self.item_id = new_ids()
        self.created_at, self.seq = int(time.time()), 0
        self.item: dict | None = None       # the output item, once opened

    def _event(self, kind: str, **fields: Any) -> tuple[str, dict]:
        ev = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return kind, ev

    def _open(self, item: dict) -> list[tuple[str, dict]]:
        self.item = item
        out = [self._event("response.output_item.added", output_index=0, item=item)]
        if item["type"] == "message":
            out.append(self._event("response.content_part.added", item_id=self.item_id, output_index=0,
                                   content_index=0, part=output_text("")))
        return out

    def opening(self) -> list[tuple[str, dict]]:
        resp = response_object(self.body, self.model, self.resp_id, self.created_at)
        out = [self._event("response.created", response=resp), self._event("response.in_progress", response=resp)]
        if self.tool is None:
            out += self._open(message_item(self.item_id, None, "in_progress"))
        elif self.tool.name is not None:
            out += self._open(call_item(self.item_id, self.tool.name, "", "in_progress"))
        return out

    def delta(self, text: str, logprobs: list[dict] | None = None) -> list[tuple[str, dict]]:
        if self.item is None:           # a call whose function is not known yet: sent whole at the end
            return []
        if self.item["type"] == "function_call":
            return [self._event("response.function_call_arguments.delta", item_id=self.item["id"], output_index=0,
                                delta=text)]
        return [self._event("response.output_text.delta", item_id=self.item_id, output_index=0, content_index=0,
                            delta=text, logprobs=delta_logprobs(logprobs or []))]

    def closing(self, text: str, finish_reason: str, input_tokens: int, cached_tokens: int, output_tokens: int,
                logprobs: list[dict] | None = None) -> list[tuple[str, dict]]:
        resp = finished(self.body, self.model, self.resp_id, self.item_id, self.created_at, text, finish_reason,
                        input_tokens, cached_tokens, output_tokens, self.tool, logprobs)
        item, out = resp["output"][0], []
        if self.item is None:           # opened now, and its whole content sent as one delta
            out += self._open({**item, "status": "in_progress", **(
                {"arguments": ""} if item["type"] == "function_call" else {"content": []})})
            out += self.delta(item["arguments"] if item["type"] == "function_call" else text, logprobs)
        if item["type"] == "function_call":
            out.append(self._event("response.function_call_arguments.done", item_id=item["id"], output_index=0,
                                   arguments=item["arguments"]))
        else:
            at = {"item_id": self.item_id, "output_index": 0, "content_index": 0}
            out += [self._event("response.output_text.done", **at, text=text, logprobs=delta_logprobs(logprobs or [])),
                    self._event("response.content_part.done", **at, part=item["content"][0])]
        return out + [self._event("response.output_item.done", output_index=0, item=item),
                      self._event(f"response.{resp['status']}", response=resp)]

    def error(self, message: str, code: str = "server_error") -> tuple[str, dict]:
        return self._event("error", code=code, message=message, param=None)
