"""Validation of a batch input file, line by line, as OpenAI's Batch API checks it.

Pure: it reads lines and tokenizers, never the database, so every rule can be
tested alone. Lines are checked as they stream; a valid line is rendered to
the exact prompt text the model will see (chat template applied) and tokenized
in groups, so the scheduler and workers share the same token ids.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

MAX_ERRORS = 100
CHAT_ROLES = ("system", "developer", "user", "assistant", "tool")
UNSUPPORTED = {  # parameters we refuse rather than silently ignore
    "logprobs": "logprobs are not supported", "top_logprobs": "logprobs are not supported",
    "tools": "tool calling is not supported", "functions": "function calling is not supported",
    "tool_choice": "tool calling is not supported", "function_call": "function calling is not supported",
    "echo": "echo is not supported", "suffix": "suffix is not supported", "best_of": "best_of is not supported",
    "audio": "audio output is not supported", "modalities": "only text output is supported",
}


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
    text: str | None = None           # to tokenize; None when the prompt came as token ids
    prompt_ids: list[int] | None = None


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
    for key, why in UNSUPPORTED.items():
        if body.get(key) and not (key == "best_of" and body[key] == 1):
            raise _Bad("unsupported_parameter", f"'{key}': {why}.", key)
    _number(body, "temperature", 0.0, 2.0)
    _number(body, "top_p", 0.0, 1.0)
    _number(body, "presence_penalty", -2.0, 2.0)
    _number(body, "frequency_penalty", -2.0, 2.0)
    n = _int(body, "n", 1)
    if n is not None and n != 1:
        raise _Bad("unsupported_value", "'n' must be 1: send one line per sample.", "n")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise _Bad("invalid_value", f"'seed' must be an integer, got {seed!r}.", "seed")
    stop = body.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else stop
        if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) or len(stops) > 4:
            raise _Bad("invalid_value", "'stop' must be a non-empty string or a list of at most 4 of them.", "stop")


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


def _check_line(raw: bytes, lineno: int, endpoint: str, models: dict[str, ModelInfo],
                seen: set[str], batch_model: list[str]) -> ValidRequest:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _Bad("invalid_utf8", "The line is not valid UTF-8.")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise _Bad("invalid_json_line", f"The line is not valid JSON: {e.msg}.")
    if not isinstance(obj, dict):
        raise _Bad("invalid_json_line", "The line must be a JSON object.")
    for key in ("custom_id", "method", "url", "body"):
        if key not in obj:
            raise _Bad("missing_required_parameter", f"Missing required parameter: '{key}'.", key)
    cid = obj["custom_id"]
    if not isinstance(cid, str) or not cid or len(cid) > 512:
        raise _Bad("invalid_value", "'custom_id' must be a non-empty string of at most 512 characters.", "custom_id")
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
        return ValidRequest(lineno, cid, body, model, mt, text=info.render_chat(messages))
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    mt = _int(body, "max_tokens", 1)
    mt = 16 if mt is None else mt            # the completions endpoint's documented default
    if isinstance(prompt, str) and prompt:
        return ValidRequest(lineno, cid, body, model, mt, prompt_ids=info.encode_prompt([prompt])[0])
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0
                                                   for t in prompt):
        return ValidRequest(lineno, cid, body, model, mt, prompt_ids=list(prompt))
    raise _Bad("invalid_value", "'prompt' must be a non-empty string or an array of token ids (one prompt per line).",
               "prompt")


def validate(lines: Iterable[bytes], endpoint: str, models: dict[str, ModelInfo], max_lines: int,
             group: int = 256) -> Iterator[ValidRequest | LineError]:
    """Yield each line's ValidRequest (tokenized) or LineError; valid lines come in line order.

    Blank lines are skipped. Tokenization happens in groups of `group` lines so
    the fast tokenizer batches its work.
    """
    seen: set[str] = set()
    batch_model: list[str] = []
    pending: list[ValidRequest] = []
    count = 0

    def flush() -> Iterator[ValidRequest | LineError]:
        todo = [r for r in pending if r.prompt_ids is None]
        if todo:
            ids = models[todo[0].model].encode([r.text for r in todo])
            for r, t in zip(todo, ids):
                r.prompt_ids, r.text = t, None
        for r in pending:
            info = models[r.model]
            need = len(r.prompt_ids) + (r.max_tokens or 1)
            if need > info.context_length:
                yield LineError(r.line, "context_length_exceeded",
                                f"The prompt ({len(r.prompt_ids)} tokens) plus max_tokens ({r.max_tokens}) exceeds "
                                f"the model's context length of {info.context_length} tokens.", "body")
            else:
                if r.max_tokens is None:
                    r.max_tokens = info.context_length - len(r.prompt_ids)
                yield r
        pending.clear()

    for lineno, raw in enumerate(lines, start=1):
        raw = raw.rstrip(b"\r\n")
        if not raw.strip():
            continue
        count += 1
        if count > max_lines:
            yield LineError(lineno, "too_many_requests", f"The file has more than {max_lines} requests.")
            break
        try:
            pending.append(_check_line(raw, lineno, endpoint, models, seen, batch_model))
        except _Bad as e:
            yield LineError(lineno, e.code, e.message, e.param)
        if len(pending) >= group:
            yield from flush()
    yield from flush()
    if count == 0:
        yield LineError(1, "empty_file", "The input file has no requests.")
