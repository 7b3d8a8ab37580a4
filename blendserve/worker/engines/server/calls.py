"""One request to a server's ``/v1/completions``, with the prompt as token ids, and what its answer means.

Errors fall in three kinds, because the worker treats them differently:

- ``Unavailable``: the server could not be reached, dropped the connection, or said it cannot serve now
  (502/503/504 from a router or a server starting, 429, 408, a router's 500 about its upstream), or does
  not know the model or the key (404, 401, 403: a server restarted with other flags). Nothing is wrong
  with the request: it is held and runs again once the server answers, and no attempt is counted.
- ``Refused``: any other 4xx, the server's answer about this request alone (a prompt past the context, a
  parameter it rejects). It will not change on a retry: the request fails with the server's message as
  its error line (``GenResult.error``) and the stream runs on.
- ``Rejected``: a 500, or an answer that cannot be read. It may be the request or the server: the request
  goes down the worker's per-request failure path (an attempt counted, run alone, then its error line).

The prompt goes as token ids (tokenized once, at validation), so the server's tokenizer and chat template
never touch it. vLLM returns the completion's token ids too (``return_token_ids``) and names logprobs by
token id (``return_tokens_as_token_ids``), so the worker names them as its other engines do
(blendserve/worker/engines/logprobs.py). Other servers return text, re-encoded with the model's tokenizer where the
worker has it; their usage gives the counts.
"""
from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from blendserve.worker.engines.base import GenRequest, GenResult, TokenLogprob
from blendserve.worker.engines.vllm_args import nucleus

RETRY_STATUS = frozenset({401, 403, 404, 408, 429, 502, 503, 504})
ROUTER_AWAY = frozenset({"call_upstream_request_error", "no_workers", "no_available_workers",
                         "no_healthy_workers", "no_healthy_worker_pair"})

Encode = Callable[[str], list[int]]


class Unavailable(Exception):
    """The server is down, restarting, overloaded or misconfigured: the request runs again later, uncharged."""


class Refused(Exception):
    """The server refused this request for a reason of its own (a 4xx): it fails alone, with this message."""


class Rejected(Exception):
    """The server failed on this request (a 500): the request's own failure, counted and retried alone."""


def body(request: GenRequest, model: str, kind: str, stream: bool, names: bool,
         seq: int | None = None) -> dict[str, Any]:
    """The /v1/completions body: OpenAI's fields, plus each server's own for what OpenAI's completions lack
    (token ids back, structured output); other servers may refuse fields they do not know.
    ``names``: the worker can name token ids (it has the tokenizer), so vLLM may send logprobs by id.
    ``seq``: the request's place in the plan (negative: interactive), vLLM's priority (lower runs first)
    where the server runs its priority policy; None: no priority (vLLM refuses one under FCFS)."""
    p = request.params
    out: dict[str, Any] = {"model": model, "prompt": list(request.input_ids), "max_tokens": p.max_tokens,
                           "temperature": p.temperature, "top_p": p.top_p,
                           "presence_penalty": p.presence_penalty, "frequency_penalty": p.frequency_penalty}
    if p.stop:
        out["stop"] = list(p.stop)
    if p.seed is not None:
        out["seed"] = p.seed
    if p.logit_bias:
        out["logit_bias"] = {str(t): b for t, b in p.logit_bias}
    if p.n > 1:
        out["n"] = p.n
    if p.logprobs is not None:
        out["logprobs"] = p.logprobs
        if kind == "vllm" and names:
            out["return_tokens_as_token_ids"] = True
    if p.json_schema is not None:
        schema = json.loads(p.json_schema)
        # vLLM 0.32 takes whitespace from its --structured-outputs-config (docs/engine-servers.md)
        if kind == "vllm":
            out["structured_outputs"] = {"json": schema, "disable_any_whitespace": True,
                                         "disable_additional_properties": p.strict_schema}
        else:
            out["response_format"] = {"type": "json_schema",
                                      "json_schema": {"name": "output", "schema": schema, "strict": p.strict_schema}}
    if kind == "vllm":
        out["return_token_ids"] = True
        out.update(nucleus(p))      # top_p 0: top_k 1 (vLLM refuses a top_p of 0; worker/engines/vllm_args.py)
        if seq is not None:
            out["priority"] = seq
    if stream:
        out.update(stream=True, stream_options={"include_usage": True})
    return out


def error_for(status: int, text: str) -> Exception:
    """The kind of error a non-200 answer is. A router's 500 about its upstream (SGLang's router: a server
    it could not reach, or none to send to) is the server being away, not this request's fault."""
    message = f"The model server answered {status}: {text[:500]}"
    if status in RETRY_STATUS or (status >= 500 and _router_code(text) in ROUTER_AWAY):
        return Unavailable(message)
    return Refused(message) if 400 <= status < 500 else Rejected(message)


def _router_code(text: str) -> str | None:
    try:
        error = json.loads(text).get("error")
    except (ValueError, AttributeError):
        return None
    return error.get("code") if isinstance(error, dict) else None


def _entry(token: str, logprob: float, top: list[tuple[str, float]], names: Any) -> TokenLogprob:
    """One logprobs position: by token id where vLLM named it so (``token_id:N``), else by its text."""
    if names is not None and token.startswith("token_id:"):
        return names.entry(int(token[9:]), logprob, [(int(t[9:]), lp) for t, lp in top if t.startswith("token_id:")])
    return TokenLogprob(token, list(token.encode()), logprob,
                        tuple(TokenLogprob(t, list(t.encode()), lp) for t, lp in top))


def logprob_entries(lp: dict | None, k: int, names: Any) -> list[TokenLogprob]:
    """OpenAI's completions logprobs (tokens, token_logprobs, top_logprobs) as TokenLogprob entries, the
    top ones the k likeliest (vLLM adds the chosen token to each position's map)."""
    if not lp:
        return []
    tokens, values = lp.get("tokens") or [], lp.get("token_logprobs") or []
    tops = lp.get("top_logprobs") or [None] * len(tokens)
    return [_entry(t, float(v if v is not None else float("-inf")),
                   sorted((top or {}).items(), key=lambda x: -x[1])[:k], names)
            for t, v, top in zip(tokens, values, tops)]


@dataclass
class _Choice:
    text: list[str] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finish: str | None = None


def _result(request: GenRequest, choices: dict[int, _Choice], usage: dict | None, got_ids: bool,
            encode: Encode | None) -> GenResult:
    if any(c.finish == "abort" for c in choices.values()):     # SGLang ended it on its own
        raise Rejected("the model server aborted the request")
    usage = usage or {}
    want_lp = request.params.logprobs is not None
    results = []
    for _, c in sorted(choices.items()):
        text = "".join(c.text)
        ids = c.ids if got_ids else (encode(text) if encode is not None and text else [])
        results.append(GenResult(key=request.key, output_ids=ids, text=text,
                                 finish_reason="length" if c.finish == "length" else "stop",
                                 prompt_tokens=int(usage.get("prompt_tokens") or len(request.input_ids)),
                                 cached_tokens=int((usage.get("prompt_tokens_details") or {}).get("cached_tokens")
                                                   or 0),
                                 logprobs=c.logprobs if want_lp else None))
    first, *rest = results
    first.choices = rest
    first.__post_init__()
    if usage.get("completion_tokens") is not None:      # the server's count wins over a re-encoding
        first.completion_tokens = int(usage["completion_tokens"])
    return first


def _take(choices: dict[int, _Choice], choice: dict, request: GenRequest, names: Any,
          encode: Encode | None) -> tuple[int, list[int], list[TokenLogprob]]:
    """Add one answer's (or one stream chunk's) choice to its accumulator; its index, new ids and entries."""
    c = choices.setdefault(int(choice.get("index") or 0), _Choice())
    piece = choice.get("text") or ""
    new = choice.get("token_ids")
    if new is None:
        new = encode(piece) if encode is not None and piece else []
    entries = logprob_entries(choice.get("logprobs"), request.params.logprobs or 0, names)
    c.text.append(piece)
    c.ids += new
    c.logprobs += entries
    c.finish = choice.get("finish_reason") or c.finish
    return int(choice.get("index") or 0), list(new), entries


async def sse_chunks(client: httpx.AsyncClient, path: str, payload: dict) -> AsyncIterator[dict]:
    """The JSON chunks of a server-sent event stream answering a POST, up to `data: [DONE]`; an answer other
    than 200 raises as a plain call's would (error_for)."""
    async with client.stream("POST", path, json=payload) as r:
        if r.status_code != 200:
            raise error_for(r.status_code, (await r.aread()).decode(errors="replace"))
        async for line in r.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                return
            yield json.loads(data)


async def complete(client: httpx.AsyncClient, request: GenRequest, model: str, kind: str,
                   encode: Encode | None, names: Any, seq: int | None = None) -> GenResult:
    """A batch request: one POST, one answer."""
    try:
        r = await client.post("/v1/completions", json=body(request, model, kind, False, names is not None, seq))
        if r.status_code != 200:
            raise error_for(r.status_code, r.text)
        data = r.json()
    except httpx.TransportError as e:
        raise Unavailable(f"{type(e).__name__}: {e}") from e
    except ValueError as e:         # a body that is not JSON: a proxy's error page, a server going down
        raise Unavailable(f"the model server's answer was not JSON: {e}") from e
    choices: dict[int, _Choice] = {}
    for choice in data["choices"]:
        _take(choices, choice, request, names, encode)
    return _result(request, choices, data.get("usage"), kind == "vllm", encode)


async def stream(client: httpx.AsyncClient, request: GenRequest, model: str, kind: str, encode: Encode | None,
                 names: Any, sent: dict[int, int], seq: int | None = None) -> GenResult:
    """An interactive request, streamed: each chunk's tokens go to ``request.on_tokens`` as they come
    (with ``choice=`` and ``logprobs=`` where the request asked for n > 1 or logprobs).

    ``sent``: tokens per choice its caller already has, from an earlier try the server lost; a greedy rerun
    gives them again and they are not sent twice (a sampled rerun may differ: the caller's stream then ends
    with the final text's remainder, see blendserve/worker/interactive.py). It is updated as tokens go out."""
    assert request.on_tokens is not None
    p = request.params
    keywords = p.n > 1 or p.logprobs is not None
    choices: dict[int, _Choice] = {}
    seen: dict[int, int] = {}
    usage = None
    try:
        async for chunk in sse_chunks(client, "/v1/completions",
                                      body(request, model, kind, True, names is not None, seq)):
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or ():
                index, new, entries = _take(choices, choice, request, names, encode)
                skip = max(0, sent.get(index, 0) - seen.get(index, 0))
                seen[index] = seen.get(index, 0) + len(new)
                if len(new) > skip:
                    sent[index] = sent.get(index, 0) + len(new) - skip
                    if keywords:
                        request.on_tokens(new[skip:], choice=index,
                                          logprobs=entries[skip:] if p.logprobs is not None else None)
                    else:
                        request.on_tokens(new[skip:])
    except httpx.TransportError as e:
        raise Unavailable(f"{type(e).__name__}: {e}") from e
    except ValueError as e:
        raise Unavailable(f"the model server's stream was not JSON: {e}") from e
    if not choices or any(c.finish is None for c in choices.values()):
        raise Unavailable("the model server's stream ended before the completion did")
    return _result(request, choices, usage, kind == "vllm", encode)
