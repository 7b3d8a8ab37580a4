"""Engine results to the bodies the synchronous endpoints return, and request bodies to sampling params."""
from __future__ import annotations

import time

from core.ids import new_id
from worker.engines.base import GenResult, SamplingParams


def _or(value, default):
    """OpenAI reads an explicit ``null`` as "use the default"."""
    return default if value is None else value


def sampling_params(body: dict, max_tokens: int) -> SamplingParams:
    stop = body.get("stop")
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
    )


def usage(r: GenResult) -> dict:
    return {"prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens,
            "total_tokens": r.prompt_tokens + r.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": r.cached_tokens},
            "completion_tokens_details": {"reasoning_tokens": 0}}


def response_body(endpoint: str, model: str, r: GenResult) -> dict:
    created = int(time.time())
    if endpoint == "/v1/chat/completions":
        return {"id": new_id("chatcmpl-"), "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": r.text, "refusal": None},
                             "logprobs": None, "finish_reason": r.finish_reason}],
                "usage": usage(r), "system_fingerprint": None}
    return {"id": new_id("cmpl-"), "object": "text_completion", "created": created, "model": model,
            "choices": [{"index": 0, "text": r.text, "logprobs": None, "finish_reason": r.finish_reason}],
            "usage": usage(r), "system_fingerprint": None}
