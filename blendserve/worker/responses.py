"""Engine results to the bodies the synchronous endpoints return, and request bodies to sampling params."""
from __future__ import annotations

import time

from blendserve.core.ids import new_id
from blendserve.protocol.structured import ToolCall, constraint, parse_calls, split_call
from blendserve.worker.engines.base import GenResult, SamplingParams, TokenLogprob


def _or(value, default):
    """OpenAI reads an explicit ``null`` as "use the default"."""
    return default if value is None else value


def sampling_params(body: dict, max_tokens: int) -> SamplingParams:
    stop = body.get("stop")
    schema, _ = constraint(body)
    lp = body.get("logprobs")
    # Chat: `logprobs: true` and `top_logprobs` k; completions: `logprobs` k (an integer).
    logprobs = (_or(body.get("top_logprobs"), 0) if lp else None) if isinstance(lp, bool) or lp is None else int(lp)
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=float(_or(body.get("temperature"), 1.0)),
        top_p=float(_or(body.get("top_p"), 1.0)),
        stop=tuple([stop] if isinstance(stop, str) else stop or ()),
        seed=body.get("seed"),
        presence_penalty=float(_or(body.get("presence_penalty"), 0.0)),
        frequency_penalty=float(_or(body.get("frequency_penalty"), 0.0)),
        # JSON object keys are strings: {"50256": -100} bans token 50256.
        logit_bias=tuple(sorted((int(t), float(b)) for t, b in (_or(body.get("logit_bias"), {})).items())),
        json_schema=schema.schema if schema is not None else None,
        strict_schema=schema.strict if schema is not None else False,
        logprobs=logprobs,
        n=int(_or(body.get("n"), 1)),
    )


def tool_call(body: dict) -> ToolCall | None:
    """How the output becomes `message.tool_calls` (a forced call), or None for a plain message."""
    return constraint(body)[1]


def usage(r: GenResult) -> dict:
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


def chat_message(r: GenResult, tool: ToolCall | None) -> tuple[dict, str]:
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


def response_body(endpoint: str, model: str, r: GenResult, tool: ToolCall | None = None) -> dict:
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
