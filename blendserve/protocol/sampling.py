"""What a request asks of an engine's sampler, and what it reports back per token: the types the request
bodies (blendserve/protocol/requests.py) turn into and the result bodies are built from.

They live with the protocol, not with the engines, so the rules of a body and
the bodies of its answers never import the worker; the engines import them
from blendserve/worker/engines/base.py, which re-exports them.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()   # (token id, bias) pairs; a tuple keeps the params hashable
    # Structured output: the JSON schema every output must match (canonical JSON text, so equal schemas share
    # one compiled grammar), and whether OpenAI's strict rules hold (no property beyond `properties`).
    json_schema: str | None = None
    strict_schema: bool = False
    logprobs: int | None = None    # None: none; k >= 0: each output token's log-probability and its k likeliest
    n: int = 1                     # choices of one prompt, each its own sampling stream, one prefill


@dataclass(frozen=True)
class TokenLogprob:
    """One output token as OpenAI reports it: its text, its UTF-8 bytes, its log-probability under the
    distribution it was drawn from, and the likeliest tokens of that distribution (``top``, empty unless asked)."""
    token: str
    bytes: list[int]
    logprob: float
    top: tuple[TokenLogprob, ...] = ()
