"""An engine's result as the body its endpoint returns: chat.completion, text_completion, the embedding list
and the Response object.

Built from the result and the request's typed body (blendserve/protocol/requests.py),
in the batch writer and the interactive endpoints alike, so a batch line's
response and an interactive answer are the same object. Pure: the result is
read through `Generated`, the fields every engine's result has, so the
protocol never imports the worker.
"""
from __future__ import annotations

import time
from typing import Any, Protocol

from blendserve.core.ids import new_id
from blendserve.protocol import embeddings, response_object
from blendserve.protocol.requests import EmbeddingRequest, RequestBody, ResponsesRequest
from blendserve.protocol.sampling import TokenLogprob
from blendserve.protocol.structured import ToolCall, parse_calls, split_call


class Generated(Protocol):
    """What a body is built from: one finished request's result (blendserve/worker/engines/base.py's GenResult;
    an embedding engine's adds `vectors`)."""
    text: str
    finish_reason: str
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    logprobs: list[TokenLogprob] | None
    choices: list[Any]
    fingerprint: str | None


def usage(r: Generated) -> dict:
    return {"prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens,
            "total_tokens": r.prompt_tokens + r.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": r.cached_tokens},
            "completion_tokens_details": {"reasoning_tokens": 0}}


def logprob_entries(entries: list[TokenLogprob]) -> list[dict]:
    """Each output token as OpenAI lists it (chat's `content`, the Responses API's `output_text.logprobs`):
    token, logprob, bytes and the likeliest tokens."""
    return [{"token": e.token, "logprob": e.logprob, "bytes": e.bytes,
             "top_logprobs": [{"token": t.token, "logprob": t.logprob, "bytes": t.bytes} for t in e.top]}
            for e in entries]


def chat_logprobs(entries: list[TokenLogprob] | None) -> dict | None:
    """OpenAI's chat shape: {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}."""
    if entries is None:
        return None
    return {"content": logprob_entries(entries), "refusal": None}


def completion_logprobs(entries: list[TokenLogprob] | None, offset: int = 0) -> dict | None:
    """OpenAI's legacy shape: parallel lists of tokens, their log-probabilities, a {token: logprob} map of the
    likeliest (the chosen token included, as vLLM lists it) and each token's character offset in the text."""
    if entries is None:
        return None
    offsets, at = [], offset
    for e in entries:
        offsets.append(at)
        at += len(e.token) if not e.token.startswith("bytes:") else 0
    return {"tokens": [e.token for e in entries], "token_logprobs": [e.logprob for e in entries],
            "top_logprobs": [{e.token: e.logprob, **{t.token: t.logprob for t in e.top}} for e in entries],
            "text_offset": offsets}


def output_logprobs(entries: list[TokenLogprob] | None) -> list[dict] | None:
    """The Responses API's `output_text.logprobs`: chat's entries, or None where none were asked for."""
    return None if entries is None else logprob_entries(entries)


def chat_message(r: Generated, tool: ToolCall | None) -> tuple[dict, str]:
    """The assistant message of one choice and its finish_reason: a forced call becomes `tool_calls`; under
    tool_choice "auto" the calls the model wrote do (`parse_calls`), beside any text before them."""
    if tool is None:
        return {"role": "assistant", "content": r.text, "refusal": None}, r.finish_reason
    if tool.auto:
        content, found = parse_calls(r.text)
        if not found:
            return {"role": "assistant", "content": r.text, "refusal": None}, r.finish_reason
        calls = [{"id": new_id("call_"), "type": "function", "function": {"name": name, "arguments": args}}
                 for name, args in found]
        return {"role": "assistant", "content": content, "refusal": None, "tool_calls": calls}, \
            "tool_calls" if r.finish_reason == "stop" else r.finish_reason
    call = split_call(tool, r.text)
    if call is None:                      # cut off by max_tokens: no call to return
        return {"role": "assistant", "content": r.text, "refusal": None}, r.finish_reason
    name, arguments = call
    calls = [{"id": new_id("call_"), "type": "function", "function": {"name": name, "arguments": arguments}}]
    finish = tool.finish_reason if r.finish_reason == "stop" else r.finish_reason
    return {"role": "assistant", "content": None, "refusal": None, "tool_calls": calls}, finish


def response_body(endpoint: str, model: str, r: Generated, tool: ToolCall | None = None) -> dict:
    """A chat.completion (`endpoint` /v1/chat/completions) or a text_completion, every choice of `r`."""
    created = int(time.time())
    results = [r, *r.choices]
    if endpoint == "/v1/chat/completions":
        choices = []
        for i, c in enumerate(results):
            message, finish = chat_message(c, tool)
            choices.append({"index": i, "message": message, "logprobs": chat_logprobs(c.logprobs),
                            "finish_reason": finish})
        return {"id": new_id("chatcmpl-"), "object": "chat.completion", "created": created, "model": model,
                "choices": choices, "usage": usage(r), "system_fingerprint": r.fingerprint}
    return {"id": new_id("cmpl-"), "object": "text_completion", "created": created, "model": model,
            "choices": [{"index": i, "text": c.text, "logprobs": completion_logprobs(c.logprobs),
                         "finish_reason": c.finish_reason} for i, c in enumerate(results)],
            "usage": usage(r), "system_fingerprint": r.fingerprint}


def embedding_body(model: str, res: Any, request: EmbeddingRequest) -> dict:
    """OpenAI's CreateEmbeddingResponse of an embedding engine's result (its `vectors`)."""
    return embeddings.response_body(model, res.vectors, res.prompt_tokens, request.encoding_format or "float")


def responses_body(model: str, res: Generated, request: ResponsesRequest) -> dict:
    """The finished Response, echoing the request's settings."""
    resp_id, item_id = response_object.new_ids()
    return response_object.finished(request.params(), model, resp_id, item_id, int(time.time()), res.text,
                                    res.finish_reason, res.prompt_tokens, res.cached_tokens, res.completion_tokens,
                                    request.tool_call(), output_logprobs(res.logprobs))


def result_body(model: str, res: Generated, request: RequestBody) -> dict:
    """The body `request`'s endpoint returns for its finished result."""
    if isinstance(request, EmbeddingRequest):
        return embedding_body(model, res, request)
    if isinstance(request, ResponsesRequest):
        return responses_body(model, res, request)
    return response_body(request.endpoint, model, res, request.tool_call())
