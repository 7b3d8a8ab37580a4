"""Validation of a batch input file, line by line, as OpenAI's Batch API checks it.

Pure: it reads lines and tokenizers, never the database, so every rule can be
tested alone. Lines are checked as they stream, and validation does not
tokenize: BPE over a 200 MB file takes minutes, the checks take seconds. The
context-length rule uses an upper bound instead: with a byte-level tokenizer
every token covers at least one byte, so a prompt has at most as many tokens as
its rendered text has bytes (plus a couple of special tokens). Only a line
whose bound does not fit the context is tokenized here, exactly. The rest are
tokenized later (`tokenize`, run by the scheduler while earlier requests
already run), with the same function, so the scheduler and the workers share
the same token ids; a tokenizer that broke the bound would turn into a
per-request context_length_exceeded error there, never a wrong answer.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

import orjson

MAX_ERRORS = 100
PROMPT_KEYS = ("messages", "prompt")   # what a row does not copy: it stays in the input file
SPECIAL_MARGIN = 2      # tokens a tokenizer may add beyond the text's bytes (BOS, a SentencePiece space)
CHAT_ROLES = ("system", "developer", "user", "assistant", "tool")
UNSUPPORTED = {  # parameters we refuse rather than silently ignore
    "logprobs": "logprobs are not supported", "top_logprobs": "logprobs are not supported",
    "tools": "tool calling is not supported", "functions": "function calling is not supported",
    "tool_choice": "tool calling is not supported", "function_call": "function calling is not supported",
    "echo": "echo is not supported", "suffix": "suffix is not supported", "best_of": "best_of is not supported",
    "audio": "audio output is not supported", "modalities": "only text output is supported",
    "response_format": "structured output (JSON mode, JSON schema) is not supported; only {\"type\": \"text\"}",
    "prediction": "predicted outputs are not supported", "reasoning_effort": "the served models do not reason",
    "verbosity": "verbosity is not supported", "web_search_options": "web search is not supported",
    "stream_options": "stream_options needs 'stream': true, which a batch does not allow",
}
DEFAULTS = {"best_of": 1, "response_format": {"type": "text"}, "modalities": ["text"]}
# Applied by every engine, or only describing the caller (no effect on the output): accepted.
APPLIED = {"model", "messages", "prompt", "max_tokens", "max_completion_tokens", "temperature", "top_p", "stop",
           "seed", "n", "stream", "presence_penalty", "frequency_penalty", "logit_bias"}
DESCRIPTIVE = {"user", "metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier",
               "parallel_tool_calls"}
KNOWN = APPLIED | DESCRIPTIVE | UNSUPPORTED.keys()


@dataclass
class ModelInfo:
    name: str
    context_length: int
    render_chat: Callable[[list[dict]], str]           # messages -> prompt text (chat template applied)
    encode: Callable[[list[str]], list[list[int]]]     # batch of texts -> token ids (no extra special tokens)
    encode_prompt: Callable[[list[str]], list[list[int]]]  # completions prompts (tokenizer's own special tokens)


@dataclass
class LineError:
    line: int
    code: str
    message: str
    param: str | None = None

    def as_dict(self) -> dict:
        return {"code": self.code, "message": self.message, "param": self.param, "line": self.line}


@dataclass
class ValidRequest:
    line: int
    custom_id: str
    body: dict
    model: str
    max_tokens: int | None
    prompt_ids: list[int] | None = None    # None: tokenized later (the bound below fits the context)
    bound: int = 0                         # an upper bound of the prompt's token count
    offset: int = 0                        # where the line starts in the input file, and its length
    length: int = 0

    def params(self) -> dict:
        """The body less its prompt: what the workers need besides the token ids."""
        return {k: v for k, v in self.body.items() if k not in PROMPT_KEYS}


class _Bad(Exception):
    def __init__(self, code: str, message: str, param: str | None = None) -> None:
        self.code, self.message, self.param = code, message, param


def _number(body: dict, key: str, lo: float, hi: float) -> None:
    v = body.get(key)
    if v is None:
        return
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
        raise _Bad("invalid_value", f"'{key}' must be a number between {lo} and {hi}, got {v!r}.", key)


def _int(body: dict, key: str, lo: int) -> int | None:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise _Bad("invalid_value", f"'{key}' must be an integer >= {lo}, got {v!r}.", key)
    return v


def _check_sampling(body: dict) -> None:
    if body.get("stream"):
        raise _Bad("stream_unsupported", "'stream': true is not allowed in a batch.", "stream")
    unknown = sorted(body.keys() - KNOWN)
    if unknown:
        raise _Bad("unsupported_parameter", f"Unrecognized request argument supplied: '{unknown[0]}'.", unknown[0])
    for key in sorted(UNSUPPORTED.keys() & body.keys()):
        v = body[key]
        if v is None or v is False or v == [] or v == "" or (type(v) is int and v == 0) \
                or DEFAULTS.get(key) == v:
            continue        # null, off, empty or the default: asks for nothing we do not do
        raise _Bad("unsupported_parameter", f"'{key}': {UNSUPPORTED[key]}.", key)
    _check_logit_bias(body.get("logit_bias"))
    _number(body, "temperature", 0.0, 2.0)
    _number(body, "top_p", 0.0, 1.0)
    _number(body, "presence_penalty", -2.0, 2.0)
    _number(body, "frequency_penalty", -2.0, 2.0)
    n = _int(body, "n", 1)
    if n is not None and n != 1:
        raise _Bad("unsupported_value", "'n' must be 1: send one line per sample.", "n")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not -2**63 <= seed < 2**63):
        raise _Bad("invalid_value", f"'seed' must be a 64-bit integer, got {seed!r}.", "seed")
    stop = body.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else stop
        if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) or len(stops) > 4:
            raise _Bad("invalid_value", "'stop' must be a non-empty string or a list of at most 4 of them.", "stop")


def _check_logit_bias(bias: Any) -> None:
    """OpenAI's shape: token ids (as JSON object keys, so strings) to biases in [-100, 100]."""
    if bias is None:
        return
    if not isinstance(bias, dict):
        raise _Bad("invalid_value", "'logit_bias' must be an object mapping token ids to numbers.", "logit_bias")
    for k, v in bias.items():
        if not (k.isascii() and k.isdigit()) or len(k) > 10:
            raise _Bad("invalid_value", f"'logit_bias' keys must be token ids, got {k!r}.", "logit_bias")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not -100 <= v <= 100:
            raise _Bad("invalid_value", f"'logit_bias' values must be numbers between -100 and 100, got {v!r}.",
                       "logit_bias")


def _check_messages(messages: Any) -> list[dict]:
    if not isinstance(messages, list) or not messages:
        raise _Bad("invalid_value", "'messages' must be a non-empty array.", "messages")
    out = []
    for i, m in enumerate(messages):
        p = f"messages[{i}]"
        if not isinstance(m, dict):
            raise _Bad("invalid_value", f"'{p}' must be an object.", p)
        if m.get("role") not in CHAT_ROLES:
            raise _Bad("invalid_value", f"'{p}.role' must be one of {list(CHAT_ROLES)}, got {m.get('role')!r}.",
                       f"{p}.role")
        content = m.get("content")
        if isinstance(content, list):
            if not all(isinstance(c, dict) and c.get("type") == "text" and isinstance(c.get("text"), str)
                       for c in content):
                raise _Bad("invalid_value", f"'{p}.content' parts must be text parts.", f"{p}.content")
            content = "".join(c["text"] for c in content)
        if not isinstance(content, str):
            raise _Bad("invalid_value", f"'{p}.content' must be a string or an array of text parts.",
                       f"{p}.content")
        out.append({"role": "system" if m["role"] == "developer" else m["role"], "content": content})
    return out


def _utf8_len(s: str) -> int:
    return len(s) if s.isascii() else len(s.encode())


def _slow_loads(raw: bytes) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _Bad("invalid_utf8", "The line is not valid UTF-8.")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise _Bad("invalid_json_line", f"The line is not valid JSON: {e.msg}.")
    try:
        json.dumps(obj, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        raise _Bad("invalid_value", "The line holds an unpaired UTF-16 surrogate escape (\\ud800-\\udfff).")
    return obj


def _check_line(raw: bytes, lineno: int, endpoint: str, models: dict[str, ModelInfo],
                seen: set[str], batch_model: list[str], skeletons: dict[tuple, int]) -> ValidRequest:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        obj = _slow_loads(raw)      # the standard library's message, or a number orjson refuses (> 64 bits)
    if not isinstance(obj, dict):
        raise _Bad("invalid_json_line", "The line must be a JSON object.")
    for key in ("custom_id", "method", "url", "body"):
        if key not in obj:
            raise _Bad("missing_required_parameter", f"Missing required parameter: '{key}'.", key)
    cid = obj["custom_id"]
    if not isinstance(cid, str) or not cid or len(cid) > 512:
        raise _Bad("invalid_value", "'custom_id' must be a non-empty string of at most 512 characters.", "custom_id")
    if "\x00" in cid:      # PostgreSQL text cannot hold NUL; OpenAI's ids never need one
        raise _Bad("invalid_value", "'custom_id' must not contain a NUL character (\\u0000).", "custom_id")
    if cid in seen:
        raise _Bad("duplicate_custom_id", f"The custom_id '{cid}' appears more than once in the file.", "custom_id")
    seen.add(cid)
    if obj["method"] != "POST":
        raise _Bad("invalid_method", f"'method' must be 'POST', got {obj['method']!r}.", "method")
    if obj["url"] != endpoint:
        raise _Bad("mismatched_endpoint", f"'url' {obj['url']!r} does not match the batch endpoint '{endpoint}'.",
                   "url")
    body = obj["body"]
    if not isinstance(body, dict):
        raise _Bad("invalid_value", "'body' must be a JSON object.", "body")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _Bad("missing_required_parameter", "Missing required parameter: 'body.model'.", "body.model")
    if model not in models:
        raise _Bad("model_not_found", f"The model '{model}' is not served here; served: {sorted(models)}.",
                   "body.model")
    if batch_model and model != batch_model[0]:
        raise _Bad("mismatched_model", f"Every line must use the same model: '{batch_model[0]}' on an earlier "
                   f"line, '{model}' here.", "body.model")
    batch_model[:1] = [model]
    _check_sampling(body)
    info = models[model]
    if endpoint == "/v1/chat/completions":
        messages = _check_messages(body.get("messages"))
        mt = _int(body, "max_completion_tokens", 1)
        mt = mt if mt is not None else _int(body, "max_tokens", 1)
        roles = tuple(m["role"] for m in messages)
        if roles not in skeletons:      # the template's own bytes for this sequence of roles
            try:
                skeletons[roles] = len(info.render_chat([{"role": r, "content": "x"} for r in roles]).encode())
            except Exception as e:      # templates may refuse some orders of roles (no alternation, ...)
                raise _Bad("invalid_value", f"The model's chat template refuses these messages: {e}", "messages")
        bound = skeletons[roles] + sum(map(_utf8_len, (m["content"] for m in messages))) + SPECIAL_MARGIN
        return ValidRequest(lineno, cid, body, model, mt, bound=bound)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    mt = _int(body, "max_tokens", 1)
    mt = 16 if mt is None else mt            # the completions endpoint's documented default
    if isinstance(prompt, str) and prompt:
        return ValidRequest(lineno, cid, body, model, mt, bound=_utf8_len(prompt) + SPECIAL_MARGIN)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0
                                                   for t in prompt):
        return ValidRequest(lineno, cid, body, model, mt, prompt_ids=list(prompt))
    raise _Bad("invalid_value", "'prompt' must be a non-empty string or an array of token ids (one prompt per line).",
               "prompt")


def prompt_text(endpoint: str, body: dict, info: ModelInfo) -> str:
    """The exact text the model sees for a validated body (chat template applied)."""
    if endpoint == "/v1/chat/completions":
        return info.render_chat(_check_messages(body["messages"]))
    prompt = body["prompt"]
    return prompt[0] if isinstance(prompt, list) else prompt


def read_body(line: bytes) -> dict:
    """The body of a line that passed validation, read back from the input file."""
    try:
        return orjson.loads(line)["body"]
    except orjson.JSONDecodeError:
        return json.loads(line)["body"]         # a number orjson refuses, as in _check_line


def tokenize(endpoint: str, bodies: list[dict], info: ModelInfo) -> list[list[int]]:
    """Token ids of validated bodies with string prompts: the ids every role uses."""
    texts = [prompt_text(endpoint, b, info) for b in bodies]
    return info.encode(texts) if endpoint == "/v1/chat/completions" else info.encode_prompt(texts)


def context_error(r: ValidRequest, info: ModelInfo) -> LineError | None:
    """Fill in a missing max_tokens from the exact prompt length, or say why the request cannot fit."""
    n = len(r.prompt_ids)
    if n + (r.max_tokens or 1) > info.context_length:
        return LineError(r.line, "context_length_exceeded",
                         f"The prompt ({n} tokens) plus max_tokens ({r.max_tokens}) exceeds the model's context "
                         f"length of {info.context_length} tokens.", "body")
    if r.max_tokens is None:
        r.max_tokens = info.context_length - n
    return None


def validate(lines: Iterable[bytes], endpoint: str, models: dict[str, ModelInfo], max_lines: int,
             group: int = 64) -> Iterator[ValidRequest | LineError]:
    """Yield each line's ValidRequest or LineError; valid lines come in line order.

    Blank lines are skipped. A ValidRequest has its prompt_ids when they were
    given as ids or when its bound did not fit the context (then they were
    tokenized here, in groups of `group` lines so the fast tokenizer batches).
    """
    seen: set[str] = set()
    batch_model: list[str] = []
    skeletons: dict[tuple, int] = {}
    pending: list[ValidRequest] = []
    count = 0

    def flush() -> Iterator[ValidRequest | LineError]:
        todo = [r for r in pending if r.prompt_ids is None
                and r.bound + (r.max_tokens or 1) > models[r.model].context_length]
        if todo:
            info = models[todo[0].model]
            for r, ids in zip(todo, tokenize(endpoint, [r.body for r in todo], info)):
                r.prompt_ids = ids
        for r in pending:
            err = context_error(r, models[r.model]) if r.prompt_ids is not None else None
            yield err or r
        pending.clear()

    pos = 0
    for lineno, raw in enumerate(lines, start=1):
        offset, pos = pos, pos + len(raw)
        if not raw or raw.isspace():
            continue
        count += 1
        if count > max_lines:
            yield LineError(lineno, "too_many_requests", f"The file has more than {max_lines} requests.")
            break
        try:
            r = _check_line(raw, lineno, endpoint, models, seen, batch_model, skeletons)
            r.offset, r.length = offset, len(raw)      # JSON parsers ignore the trailing newline
            pending.append(r)
        except _Bad as e:
            yield LineError(lineno, e.code, e.message, e.param)
        if len(pending) >= group:
            yield from flush()
    yield from flush()
    if count == 0:
        yield LineError(1, "empty_file", "The input file has no requests.")
