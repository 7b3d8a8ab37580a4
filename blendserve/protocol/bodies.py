"""Checks of one request body, as OpenAI's endpoints check them: shared by batch validation and the interactive lane.

Pure: no database, no engine. The scheduler validates every line of a batch
file with these rules (blendserve/scheduler/validation.py); a worker checks an
interactive request's body with the same rules before it runs it, so a body
that one path accepts the other accepts too.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blendserve.protocol import embeddings
from blendserve.protocol.fields import (
    BodyError,
    ModelInfo,
    check_int,
    check_logit_bias,
    check_messages,
    check_number,
    is_token_ids,
    token_ids_rule,
)
from blendserve.protocol.responses_api import chat_messages
from blendserve.protocol.structured import TOOL_CALL_OPEN, auto_tools, check_auto, constraint

PROMPT_KEYS = ("messages", "prompt", "input")   # what a row does not copy: it stays in the input file
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


def check_sampling(body: dict, endpoint: str = "/v1/chat/completions", tool_calls: bool = False) -> None:
    """The body's sampling parameters, as OpenAI checks them. `tool_calls`: the model's chat template has a
    tool-call format (ModelInfo.tool_calls), so tool_choice "auto" can be served."""
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
    check_logit_bias(body.get("logit_bias"))
    check_number(body, "temperature", 0.0, 2.0)
    check_number(body, "top_p", 0.0, 1.0)
    check_number(body, "presence_penalty", -2.0, 2.0)
    check_number(body, "frequency_penalty", -2.0, 2.0)
    n = check_int(body, "n", 1)
    if n is not None and n > MAX_N:
        raise BodyError("invalid_value", f"'n' must be at most {MAX_N}, got {n}.", "n")
    check_logprobs(body, endpoint)
    constraint(body)
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


def prompt_text(endpoint: str, body: dict, info: ModelInfo) -> str:
    """The exact text the model sees for a validated body (chat template applied; under tool_choice "auto"
    with the tools, which the template lists for the model)."""
    if endpoint == "/v1/chat/completions":
        messages = check_messages(body["messages"])
        return info.render_chat(messages, tools=body["tools"]) if auto_tools(body) else info.render_chat(messages)
    if endpoint == "/v1/responses":
        return info.render_chat(chat_messages(body))
    prompt = body["prompt"]
    return prompt[0] if isinstance(prompt, list) else prompt


def tokenize(endpoint: str, bodies: list[dict], info: ModelInfo) -> list[list[int]]:
    """Token ids of validated bodies with string prompts: the ids every role uses (an embeddings body's
    inputs joined into one array: blendserve/protocol/embeddings.py)."""
    if endpoint == "/v1/embeddings":
        return embeddings.tokenize(bodies, info)
    texts = [prompt_text(endpoint, b, info) for b in bodies]
    return info.encode_prompt(texts) if endpoint == "/v1/completions" else info.encode(texts)


def model_info(name: str, path: Path, tokenizer: Any = None) -> ModelInfo:
    """The tokenizer-side facts of a checkpoint, as every role renders and tokenizes prompts.

    `tokenizer`: one already loaded from `path` (a worker's interactive server
    shares its own, instead of loading it a second time per rank). Encoding
    goes straight to a private copy of its Rust backend (no truncation, no
    padding: what transformers' call sets up), without transformers' per-call
    BatchEncoding, and chat prompts through the segment cache (blendserve.core.segments).
    """
    from tokenizers import Tokenizer

    from blendserve.core.embedstore import is_embedding_checkpoint
    from blendserve.core.modelstore import context_length, load_tokenizer, vocab_size
    from blendserve.core.segments import SegmentEncoder

    if is_embedding_checkpoint(path):
        return embeddings.embed_model_info(name, path, tokenizer)
    tok = tokenizer if tokenizer is not None else load_tokenizer(path)
    backend = Tokenizer.from_str(tok.backend_tokenizer.to_str())
    backend.no_truncation()
    backend.no_padding()
    chat = SegmentEncoder(backend)
    template = getattr(tok, "chat_template", None)
    return ModelInfo(
        name=name, context_length=context_length(path),
        render_chat=lambda messages, tools=None: tok.apply_chat_template(messages, tools=tools,
                                                                         add_generation_prompt=True, tokenize=False),
        tool_calls=isinstance(template, str) and TOOL_CALL_OPEN in template and "tools" in template,
        vocab_size=vocab_size(path),
        encode=chat.encode,
        encode_prompt=lambda texts: [e.ids for e in backend.encode_batch(texts, add_special_tokens=True)],
    )


@dataclass
class Interactive:
    """A checked synchronous request: its prompt ids, its max_tokens, whether it streams."""
    prompt_ids: list[int]
    max_tokens: int
    stream: bool
    include_usage: bool


def check_interactive(endpoint: str, body: Any, info: ModelInfo) -> Interactive:
    """Check a `/v1/chat/completions` or `/v1/completions` body as the batch path checks a line's body,
    except that `stream` (and `stream_options`) are allowed; tokenize it; fill in max_tokens as OpenAI does
    (the rest of the context for chat, 16 for completions). Raises BodyError."""
    if not isinstance(body, dict):
        raise BodyError("invalid_value", "The request body must be a JSON object.")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise BodyError("invalid_value", f"'stream' must be a boolean, got {stream!r}.", "stream")
    options = body.get("stream_options")
    if options is not None and (not stream or not isinstance(options, dict)
                                or not isinstance(options.get("include_usage", False), bool)):
        raise BodyError("invalid_value", "'stream_options' must be an object such as {\"include_usage\": true}, "
                        "and only with 'stream': true.", "stream_options")
    check_sampling({k: v for k, v in body.items() if k not in ("stream", "stream_options")}, endpoint,
                   info.tool_calls)
    if endpoint == "/v1/chat/completions":
        check_messages(body.get("messages"))
        mt = check_int(body, "max_completion_tokens", 1)
        mt = mt if mt is not None else check_int(body, "max_tokens", 1)
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not (isinstance(prompt, str) and prompt) and not is_token_ids(prompt, info.vocab_size):
            raise BodyError("invalid_value", f"'prompt' must be a non-empty string or "
                            f"{token_ids_rule(info.vocab_size)}.", "prompt")
        mt = check_int(body, "max_tokens", 1)
        mt = 16 if mt is None else mt
    ids = list(body["prompt"]) if endpoint == "/v1/completions" and isinstance(body["prompt"], list) \
        and body["prompt"] and isinstance(body["prompt"][0], int) else tokenize(endpoint, [body], info)[0]
    if len(ids) + (mt or 1) > info.context_length:
        raise BodyError("context_length_exceeded", f"The prompt ({len(ids)} tokens) plus max_tokens ({mt}) exceeds "
                        f"the model's context length of {info.context_length} tokens.", "messages")
    return Interactive(ids, mt if mt is not None else info.context_length - len(ids), bool(stream),
                       bool((options or {}).get("include_usage")))
