"""What both vLLM paths (the in-process engine, the worker in front of `vllm serve`) send as nucleus sampling.

Pure Python (no vllm import), so the rule is tested on any machine. OpenAI's `top_p: 0` means only the
likeliest token; vLLM 0.32 validates `top_p` in (0, 1] (`SamplingParams._verify_args`) before it resets
greedy requests, so a valid OpenAI request would be refused (a 400 from the server, a ValueError out of
`LLMEngine.add_request` in process). It goes to vLLM as `top_k: 1` with `top_p: 1`, as the SGLang path
sends it: the likeliest token at any temperature, and `n` choices stay allowed (a temperature of 0 would not
change what is drawn, and a top_k of 1 keeps the request's own temperature in its processed logprobs).
"""
from __future__ import annotations

from blendserve.worker.engines.base import SamplingParams


def nucleus(p: SamplingParams) -> dict[str, float | int]:
    """`top_p` (and `top_k` where `top_p` is 0) for vLLM's sampling params or a /v1/completions body."""
    if p.top_p <= 0.0:
        return {"top_p": 1.0, "top_k": 1}
    return {"top_p": p.top_p}
