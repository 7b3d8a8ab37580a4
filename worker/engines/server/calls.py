"""One request to a server's ``/v1/completions``, with the prompt as token ids, and what its answer means.

Errors fall in two kinds, because the worker treats them differently:

- ``Unavailable``: the server could not be reached, dropped the connection, or said it cannot serve now
  (502/503/504 from a router or a server starting, 429, 408). Nothing is wrong with the request: it is
  handed back and runs again once the server answers, and no attempt is counted against it.
- ``Rejected``: the server answered this request with an error of its own (400: a prompt past the
  context, a parameter it refuses; 500). The request goes down the worker's per-request failure path
  (counted attempts, then run alone, then its own error line).

The prompt goes as token ids (tokenized once, at validation), so the server's tokenizer and chat template
never touch it. vLLM returns the completion's token ids too (``return_token_ids``); other servers return
text, which is re-encoded with the model's tokenizer where the worker has it, and their usage gives the
counts.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx

from worker.engines.base import GenRequest, GenResult

RETRY_STATUS = frozenset({408, 429, 502, 503, 504})


class Unavailable(Exception):
    """The server is down, restarting or overloaded: the request runs again later, uncharged."""


class Rejected(Exception):
    """The server refused this request: the request's own failure."""


def body(request: GenRequest, model: str, token_ids: bool, stream: bool) -> dict[str, Any]:
    """The /v1/completions body: OpenAI's fields, plus vLLM's return_token_ids where the server is vLLM
    (other servers may refuse fields they do not know)."""
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
    if token_ids:
        out["return_token_ids"] = True
    if stream:
        out.update(stream=True, stream_options={"include_usage": True})
    return out


def _error(status: int, text: str) -> Exception:
    message = f"the server answered {status}: {text[:500]}"
    return Unavailable(message) if status in RETRY_STATUS else Rejected(message)


def _result(request: GenRequest, text: str, ids: list[int] | None, finish: str | None, usage: dict | None,
            encode: Callable[[str], list[int]] | None) -> GenResult:
    if finish == "abort":           # SGLang ended it on its own (a request it cannot serve)
        raise Rejected("the server aborted the request")
    usage = usage or {}
    if ids is None:
        ids = encode(text) if encode is not None and text else []
    res = GenResult(key=request.key, output_ids=ids, text=text,
                    finish_reason="length" if finish == "length" else "stop",
                    prompt_tokens=int(usage.get("prompt_tokens") or len(request.input_ids)),
                    cached_tokens=int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0))
    if usage.get("completion_tokens") is not None:      # the server's count wins over a re-encoding
        res.completion_tokens = int(usage["completion_tokens"])
    return res


async def complete(client: httpx.AsyncClient, request: GenRequest, model: str, token_ids: bool,
                   encode: Callable[[str], list[int]] | None) -> GenResult:
    """A batch request: one POST, one answer."""
    try:
        r = await client.post("/v1/completions", json=body(request, model, token_ids, stream=False))
        if r.status_code != 200:
            raise _error(r.status_code, r.text)
        data = r.json()
    except httpx.TransportError as e:
        raise Unavailable(f"{type(e).__name__}: {e}") from e
    except ValueError as e:         # a body that is not JSON: a proxy's error page, a server going down
        raise Unavailable(f"the server's answer was not JSON: {e}") from e
    choice = data["choices"][0]
    return _result(request, choice.get("text") or "", choice.get("token_ids"), choice.get("finish_reason"),
                   data.get("usage"), encode)


async def stream(client: httpx.AsyncClient, request: GenRequest, model: str, token_ids: bool,
                 encode: Callable[[str], list[int]] | None, skip: int, delivered: Callable[[int], None]) -> GenResult:
    """An interactive request, streamed: each chunk's tokens go to ``request.on_tokens`` as they come.

    ``skip``: tokens its callers already had from an earlier try that the server lost; a greedy rerun gives
    them again and they are not sent twice (a sampled rerun may differ: the caller's stream then ends with
    the final text's remainder, see worker/interactive.py). ``delivered(n)`` counts what was sent."""
    assert request.on_tokens is not None
    text, ids, finish, usage, seen = [], [], None, None, 0
    try:
        async with client.stream("POST", "/v1/completions", json=body(request, model, token_ids, stream=True)) as r:
            if r.status_code != 200:
                raise _error(r.status_code, (await r.aread()).decode(errors="replace"))
            async for line in r.aiter_lines():
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                chunk = json.loads(payload)
                usage = chunk.get("usage") or usage
                for choice in chunk.get("choices") or ():
                    piece = choice.get("text") or ""
                    new = choice.get("token_ids")
                    if new is None:
                        new = encode(piece) if encode is not None and piece else []
                    text.append(piece)
                    ids += new
                    finish = choice.get("finish_reason") or finish
                    fresh = new[max(0, skip - seen):]
                    seen += len(new)
                    if fresh:
                        request.on_tokens(list(fresh))
                        delivered(len(fresh))
    except httpx.TransportError as e:
        raise Unavailable(f"{type(e).__name__}: {e}") from e
    except ValueError as e:
        raise Unavailable(f"the server's stream was not JSON: {e}") from e
    if finish is None:              # the stream ended without a last chunk: the server went away
        raise Unavailable("the server's stream ended before the completion did")
    return _result(request, "".join(text), ids if token_ids else None, finish, usage, encode)
