"""One answer's size, bounded the same on both lanes: n * max_tokens tokens and top_logprobs * n * max_tokens
logprob entries (BLENDSERVE_LIMIT_OUTPUT_TOKENS, BLENDSERVE_LIMIT_LOGPROB_ENTRIES, core/limit_settings.py).

The API refuses an interactive call past them before a worker is asked (api/interactive_caps.py); the scheduler
refuses a batch line past them as that line's own error (scheduler/validation.py, with this rule). A line of
`n: 128, max_tokens: 2000, top_logprobs: 20` would otherwise be 256,000 tokens (more K/V than the CPU engine's
whole default pool holds, 93K tokens of SmolLM2) and 5.1 million logprob entries: the engine's thread spends
about 20 CPU-seconds naming them when it ends, every other request's step waiting, and its output line is some
300 MB of JSON. A request that leaves max_tokens out counts the model's context length, as the API counts it.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from blendserve.protocol.fields import BodyError


@dataclass(frozen=True)
class AnswerLimits:
    """The bounds on one request's answer (the fields of LimitSettings of the same names)."""
    output_tokens: int = 131072         # n * max_tokens
    logprob_entries: int = 262144       # top_logprobs * n * max_tokens

    @classmethod
    def of(cls, settings: Any) -> AnswerLimits:
        """The bounds of a deployment's LimitSettings (BLENDSERVE_LIMIT_*)."""
        return cls(**{f.name: getattr(settings, f.name) for f in fields(cls)})


DEFAULT = AnswerLimits()


def count(value: Any, default: int) -> int:
    """A count from a body as the engine will read it; anything not a positive integer counts as ``default``
    (the body's own rule refuses it elsewhere)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def top_of(logprobs: Any, top_logprobs: Any) -> int:
    """Logprob entries per token: chat's top_logprobs unless logprobs is false, or completions' logprobs count."""
    if isinstance(logprobs, int) and not isinstance(logprobs, bool):
        return max(count(logprobs, 0), count(top_logprobs, 0))
    return count(top_logprobs, 0) if logprobs is not False else 0


def check_answer(n: Any, max_tokens: Any, top: int, context_length: int, limits: AnswerLimits | None) -> None:
    """Raise BodyError (the API's codes and words) when an answer of ``n`` choices of ``max_tokens`` tokens
    (None: the rest of the context, counted as all of it) with ``top`` logprobs each would pass the bounds.
    A choice never outgrows the context: a max_tokens past it is the context rule's error, not this one's."""
    limits = limits or DEFAULT
    n, tokens = count(n, 1), min(count(max_tokens, 0) or context_length, context_length)
    if n * tokens > limits.output_tokens:
        raise BodyError("output_limit_exceeded", f"n * max_tokens ({n} * {tokens}) exceeds the limit of "
                        f"{limits.output_tokens} tokens per request (BLENDSERVE_LIMIT_OUTPUT_TOKENS); ask for fewer "
                        "choices or set a smaller max_tokens.", "n")
    if top * n * tokens > limits.logprob_entries:
        raise BodyError("logprobs_limit_exceeded", f"top_logprobs * n * max_tokens ({top} * {n} * {tokens}) exceeds "
                        f"the limit of {limits.logprob_entries} logprob entries per request "
                        "(BLENDSERVE_LIMIT_LOGPROB_ENTRIES).", "top_logprobs")
