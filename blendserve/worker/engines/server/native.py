"""One request to SGLang's native ``/generate``, with the prompt as token ids, and what its answer means.

SGLang servers and SGLang's router are sent this rather than ``/v1/completions``: the router's completions
route takes a prompt as text only (a token-id prompt is a 422), and ``/generate`` answers with the output's
token ids, its cached prompt tokens and logprobs by token id on every SGLang server, without server flags.
The sampling params and logprob arguments are the in-process SGLang engine's (blendserve/worker/engines/sglang_args.py),
so a request means the same on both.

Errors are calls.py's three kinds. A stream answers in one of SGLang's two modes: each chunk the whole
output so far (the default), or only what is new (``--incremental-streaming-output``); the server's
info says which (blendserve/worker/engines/server/discovery.py).
"""
from __future__ import annotations

from typing import Any

import httpx

from blendserve.worker.engines.base import GenRequest, GenResult
from blendserve.worker.engines.server.calls import Refused, Rejected, Unavailable, error_for, sse_chunks
from blendserve.worker.engines.sglang_args import Refused as ParamsRefused
from blendserve.worker.engines.sglang_args import (
    logprob_entries,
    logprob_kwargs,
    priority,
    sampling_params,
    without_stop_token,
)

ANY_VOCAB = 1 << 31     # the worker without the model's tokenizer leaves logit_bias ids to the server


def body(request: GenRequest, vocab: int | None, stream: bool, seq: int | None = None) -> dict[str, Any]:
    """The /generate body; raises Refused for what SGLang would refuse (blendserve/worker/engines/sglang_args.py).
    `seq`: the request's place in the plan (negative: interactive), sent as its priority; None (a server
    without priority scheduling, which may abort a request that has one): no priority."""
    try:
        params = sampling_params(request.params, vocab or ANY_VOCAB)
    except ParamsRefused as e:
        raise Refused(str(e)) from e
    out = {"input_ids": list(request.input_ids), "sampling_params": params, "stream": stream,
           **logprob_kwargs(request.params)}
    if seq is not None:
        out["priority"] = priority(seq)
    return out


def _result(request: GenRequest, outs: list[dict], names: Any) -> GenResult:
    results = []
    want_lp = request.params.logprobs is not None
    for out in outs:
        meta = out.get("meta_info") or {}
        finish = meta.get("finish_reason") or {}
        if finish.get("type") == "abort":
            raise Rejected(f"SGLang aborted the request: {finish.get('message') or finish}")
        ids = without_stop_token(list(out.get("output_ids") or []), finish)
        res = GenResult(key=request.key, output_ids=ids, text=out.get("text") or "",
                        finish_reason="length" if finish.get("type") == "length" else "stop",
                        prompt_tokens=int(meta.get("prompt_tokens") or len(request.input_ids)),
                        cached_tokens=int(meta.get("cached_tokens") or 0),
                        logprobs=entries(meta, 0, names) if want_lp else None)
        if res.logprobs is not None:
            res.logprobs = res.logprobs[:len(ids)]
        res.completion_tokens = int(meta.get("completion_tokens") or len(ids))
        results.append(res)
    outs_sorted = sorted(zip((int(o.get("index") or 0) for o in outs), results), key=lambda x: x[0])
    first, *rest = [r for _, r in outs_sorted]
    if rest:
        first.choices = rest
        first.completion_tokens += sum(c.completion_tokens for c in rest)
    return first


def entries(meta: dict, start: int, names: Any) -> list | None:
    """SGLang's logprobs from position `start`: by token id where the worker can name ids, else by text."""
    if names is None:
        return logprob_entries(meta, start)
    chosen = meta.get("output_token_logprobs")
    if chosen is None:
        return None
    tops = meta.get("output_top_logprobs") or [[] for _ in chosen]
    return [names.entry(int(tid), float(lp), [(int(t), float(tl)) for tl, t, *_ in (top or ())])
            for (lp, tid, *_), top in zip(chosen[start:], tops[start:])]


def _read(r: httpx.Response) -> Any:
    try:
        return r.json()
    except ValueError as e:
        raise Unavailable(f"the model server's answer was not JSON: {e}") from e


async def generate(client: httpx.AsyncClient, request: GenRequest, vocab: int | None, names: Any,
                   seq: int | None = None) -> GenResult:
    """A batch request: one POST, one answer (a list of n for n > 1)."""
    payload = body(request, vocab, False, seq)
    try:
        r = await client.post("/generate", json=payload)
    except httpx.TransportError as e:
        raise Unavailable(f"{type(e).__name__}: {e}") from e
    if r.status_code != 200:
        raise error_for(r.status_code, r.text)
    data = _read(r)
    return _result(request, data if isinstance(data, list) else [data], names)


async def stream(client: httpx.AsyncClient, request: GenRequest, vocab: int | None, names: Any,
                 sent: dict[int, int], incremental: bool, seq: int | None = None) -> GenResult:
    """An interactive request, streamed: as calls.stream, from SGLang's native chunks."""
    assert request.on_tokens is not None
    p = request.params
    keywords = p.n > 1 or p.logprobs is not None
    payload = body(request, vocab, True, seq)
    last: dict[int, dict] = {}
    have: dict[int, list[int]] = {}        # choice -> the output ids so far
    try:
        async for chunk in sse_chunks(client, "/generate", payload):
            if "error" in chunk:
                raise Refused(f"SGLang refused the request: {chunk['error'].get('message') or chunk['error']}")
            index = int(chunk.get("index") or 0)
            got = have.setdefault(index, [])
            start = len(got)
            ids = list(chunk.get("output_ids") or [])
            new = ids if incremental else ids[start:]
            finish = (chunk.get("meta_info") or {}).get("finish_reason")
            if finish and new:
                new = without_stop_token(new, finish)
            got += new
            # Logprob lists are the chunk's own (incremental) or the whole output's so far (cumulative).
            lp_from = 0 if incremental else start
            last[index] = _merged(last[index], chunk) if incremental and index in last else chunk
            skip = max(0, sent.get(index, 0) - start)
            if len(new) > skip:
                sent[index] = sent.get(index, 0) + len(new) - skip
                if keywords:
                    lps = (entries(chunk.get("meta_info") or {}, lp_from + skip, names) or [])[:len(new) - skip] \
                        if p.logprobs is not None else None
                    request.on_tokens(new[skip:], choice=index, logprobs=lps)
                else:
                    request.on_tokens(new[skip:])
    except httpx.TransportError as e:
        raise Unavailable(f"{type(e).__name__}: {e}") from e
    except ValueError as e:
        raise Unavailable(f"the model server's stream was not JSON: {e}") from e
    outs = [dict(last[i], output_ids=have[i]) for i in sorted(last)]
    if not outs or any(not (o.get("meta_info") or {}).get("finish_reason") for o in outs):
        raise Unavailable("the model server's stream ended before the completion did")
    return _result(request, outs, names)


def _merged(before: dict, chunk: dict) -> dict:
    """Incremental chunks: the text and logprob lists so far, with the newest meta_info's other fields."""
    meta = dict(chunk.get("meta_info") or {})
    old = before.get("meta_info") or {}
    for key in ("output_token_logprobs", "output_top_logprobs"):
        if meta.get(key) is not None:
            meta[key] = (old.get(key) or []) + meta[key]
    return {**chunk, "text": (before.get("text") or "") + (chunk.get("text") or ""), "meta_info": meta}
