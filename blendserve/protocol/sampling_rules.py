"""The rules of the sampling parameters chat and completions bodies share, as OpenAI checks them: which
parameters are applied, which only describe the caller, which are refused, and the range of each.

Pure functions of the raw body, run once per body by the request models'
validators (blendserve/protocol/requests.py), so each rule's message and
`param` are OpenAI's own words whatever path the body came in by.
"""
from __future__ import annotations

from blendserve.protocol.fields import BodyError, check_int, check_logit_bias, check_number
from blendserve.protocol.grammar_limits import GrammarLimits
from blendserve.protocol.structured import check_auto, constraint

UNSUPPORTED = {  # parameters we refuse rather than silently ignore
    "functions": "the deprecated 'functions' is not supported; send 'tools'",
    "function_call": "the deprecated 'function_call' is not supported; send 'tool_choice'",
    "echo": "echo is not supported", "suffix": "suffix is not supported", "best_of": "best_of is not supported",
    "audio": "audio output is not supported", "modalities": "only text output is supported",
    "prediction": "predicted outputs are not supported", "reasoning_effort": "the served models do not reason",
    "verbosity": "verbosity is not supported", "web_search_options": "web search is not supported",
    "stream_options": "stream_options needs 'stream': true, which a batch does not allow",
}
DEFAULTS = {"best_of": 1, "modalities": ["text"]}
# Applied by every engine, or only describing the caller (no effect on the output): accepted.
APPLIED = {"model", "messages", "prompt", "max_tokens", "max_completion_tokens", "temperature", "top_p", "stop",
           "seed", "n", "stream", "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs",
           "response_format", "tools", "tool_choice"}
MAX_N = 128             # OpenAI's bound on choices per request
MAX_TOP_LOGPROBS = {"/v1/chat/completions": 20, "/v1/completions": 5}   # OpenAI's bounds
DESCRIPTIVE = {"user", "metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier",
               "parallel_tool_calls"}
KNOWN = APPLIED | DESCRIPTIVE | UNSUPPORTED.keys()


def check_sampling(body: dict, endpoint: str = "/v1/chat/completions", tool_calls: bool = False,
                   grammar: GrammarLimits | None = None, vocab_size: int | None = None) -> None:
    """The body's sampling parameters, as OpenAI checks them. `tool_calls`: the model's chat template has a
    tool-call format (ModelInfo.tool_calls), so tool_choice "auto" can be served; `grammar`: the deployment's
    limits on output schemas (ModelInfo.grammar); `vocab_size`: logit_bias keys are token ids below it."""
    if body.get("stream"):
        raise BodyError("stream_unsupported", "'stream': true is not allowed in a batch.", "stream")
    unknown = sorted(body.keys() - KNOWN)
    if unknown:
        raise BodyError("unsupported_parameter", f"Unrecognized request argument supplied: '{unknown[0]}'.", unknown[0])
    for key in sorted(UNSUPPORTED.keys() & body.keys()):
        v = body[key]
        if v is None or v is False or v == [] or v == "" or (type(v) is int and v == 0) \
                or DEFAULTS.get(key) == v:
            continue        # null, off, empty or the default: asks for nothing we do not do
        raise BodyError("unsupported_parameter", f"'{key}': {UNSUPPORTED[key]}.", key)
    check_logit_bias(body.get("logit_bias"), vocab_size)
    check_number(body, "temperature", 0.0, 2.0)
    check_number(body, "top_p", 0.0, 1.0)
    check_number(body, "presence_penalty", -2.0, 2.0)
    check_number(body, "frequency_penalty", -2.0, 2.0)
    n = check_int(body, "n", 1)
    if n is not None and n > MAX_N:
        raise BodyError("invalid_value", f"'n' must be at most {MAX_N}, got {n}.", "n")
    check_logprobs(body, endpoint)
    constraint(body, grammar)
    check_auto(body, tool_calls)
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not -2**63 <= seed < 2**63):
        raise BodyError("invalid_value", f"'seed' must be a 64-bit integer, got {seed!r}.", "seed")
    stop = body.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else stop
        if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) or len(stops) > 4:
            raise BodyError("invalid_value", "'stop' must be a non-empty string or a list of at most 4 of them.",
                            "stop")


def check_logprobs(body: dict, endpoint: str) -> None:
    """Chat: `logprobs` a boolean, `top_logprobs` 0-20 and only with it. Completions: `logprobs` 0-5 (the number
    of likeliest tokens listed beside each chosen one)."""
    most = MAX_TOP_LOGPROBS.get(endpoint, 20)
    lp, top = body.get("logprobs"), body.get("top_logprobs")
    if endpoint == "/v1/completions":
        if lp is not None and (isinstance(lp, bool) or not isinstance(lp, int) or not 0 <= lp <= most):
            raise BodyError("invalid_value", f"'logprobs' must be an integer between 0 and {most}, got {lp!r}.",
                            "logprobs")
        if top is not None:
            raise BodyError("unsupported_parameter", "Unrecognized request argument supplied: 'top_logprobs'.",
                            "top_logprobs")
        return
    if lp is not None and not isinstance(lp, bool):
        raise BodyError("invalid_value", f"'logprobs' must be a boolean, got {lp!r}.", "logprobs")
    if top is not None:
        if isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= most:
            raise BodyError("invalid_value", f"'top_logprobs' must be an integer between 0 and {most}, got {top!r}.",
                            "top_logprobs")
        if not lp:
            raise BodyError("invalid_value", "'top_logprobs' needs 'logprobs': true.", "top_logprobs")


