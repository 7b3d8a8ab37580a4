"""What the checks of every endpoint's body share: the error they raise, the rules of single fields, and the
model facts they check against.

The endpoint modules (blendserve/protocol/bodies.py for chat and completions,
protocol/structured.py, protocol/responses_api.py, protocol/embeddings.py) build on this
one and never on each other's checks, so no import runs in a circle.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SPECIAL_MARGIN = 2      # tokens a tokenizer may add beyond the text's bytes (BOS, a SentencePiece space)
CHAT_ROLES = ("system", "developer", "user", "assistant", "tool")


@dataclass
class ModelInfo:
    name: str
    context_length: int
    render_chat: Callable[..., str]    # (messages, tools=None) -> prompt text (chat template applied)
    encode: Callable[[list[str]], list[list[int]]]     # batch of texts -> token ids (no extra special tokens)
    encode_prompt: Callable[[list[str]], list[list[int]]]  # completions prompts (tokenizer's own special tokens)
    task: str = "generate"      # "embed": an embedding model, served on /v1/embeddings only (protocol/embeddings.py)
    # The chat template writes calls as <tool_call>{"name": ..., "arguments": ...}</tool_call> (Hermes' format,
    # Qwen's and others'): tool_choice "auto" is served, the calls read back out of the text.
    tool_calls: bool = False
    vocab_size: int | None = None   # token ids a prompt may hold are below it (None: unknown, below 2**31)
    grammar: Any = None             # output schemas' GrammarLimits (protocol/grammar_limits.py); None: the defaults
    answer: Any = None              # one answer's AnswerLimits (protocol/answer_size.py); None: the defaults


def is_token_ids(v: Any, vocab_size: int | None) -> bool:
    """A non-empty list of token ids of the vocabulary. An id past it would fail the engine's embedding
    lookup in the middle of a step shared with other requests, so it is refused at the door."""
    top = vocab_size or 2**31
    return isinstance(v, list) and bool(v) and all(
        isinstance(t, int) and not isinstance(t, bool) and 0 <= t < top for t in v)


def token_id_error(ids: Any, vocab_size: int | None) -> str | None:
    """Where a list of integer ids holds one outside the vocabulary (or, without one, outside int32, the
    width ids are stored in): a sentence naming the first such id, its position and the vocabulary; else None."""
    if not isinstance(ids, list):
        return None
    top = vocab_size or 2**31
    try:
        if not ids or (min(ids) >= 0 and max(ids) < top):       # the common case, at C speed
            return None
    except TypeError:
        pass
    for i, t in enumerate(ids):
        if isinstance(t, int) and not isinstance(t, bool) and not 0 <= t < top:
            where = f"the model's vocabulary of {vocab_size} tokens" if vocab_size else "the 32-bit token ids"
            return f"Token id {t} at position {i} is outside {where} (ids 0 to {top - 1})."
    return None


def token_ids_rule(vocab_size: int | None) -> str:
    """How an error message words `is_token_ids`' rule."""
    return "an array of token ids" + (f" below the vocabulary size, {vocab_size}" if vocab_size else "")


class BodyError(Exception):
    """A body breaks a rule: an OpenAI error code, a message and the parameter at fault."""

    def __init__(self, code: str, message: str, param: str | None = None) -> None:
        self.code, self.message, self.param = code, message, param


def check_number(body: dict, key: str, lo: float, hi: float) -> None:
    v = body.get(key)
    if v is None:
        return
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
        raise BodyError("invalid_value", f"'{key}' must be a number between {lo} and {hi}, got {v!r}.", key)


def check_int(body: dict, key: str, lo: int) -> int | None:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise BodyError("invalid_value", f"'{key}' must be an integer >= {lo}, got {v!r}.", key)
    return v


def check_logit_bias(bias: Any, vocab_size: int | None = None) -> None:
    """OpenAI's shape: token ids (as JSON object keys, so strings) to biases in [-100, 100]; an id the model
    does not have (at or past ``vocab_size``) is refused, as OpenAI refuses it, not silently dropped."""
    if bias is None:
        return
    if not isinstance(bias, dict):
        raise BodyError("invalid_value", "'logit_bias' must be an object mapping token ids to numbers.", "logit_bias")
    for k, v in bias.items():
        if not (k.isascii() and k.isdigit()) or len(k) > 10:
            raise BodyError("invalid_value", f"'logit_bias' keys must be token ids, got {k!r}.", "logit_bias")
        if vocab_size is not None and int(k) >= vocab_size:
            raise BodyError("invalid_value", f"Invalid key in 'logit_bias': {k}. The model's vocabulary has "
                            f"{vocab_size} tokens (ids 0 to {vocab_size - 1}).", "logit_bias")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not -100 <= v <= 100:
            raise BodyError("invalid_value", f"'logit_bias' values must be numbers between -100 and 100, got {v!r}.",
                       "logit_bias")


def check_messages(messages: Any) -> list[dict]:
    if not isinstance(messages, list) or not messages:
        raise BodyError("invalid_value", "'messages' must be a non-empty array.", "messages")
    out = []
    for i, m in enumerate(messages):
        p = f"messages[{i}]"
        if not isinstance(m, dict):
            raise BodyError("invalid_value", f"'{p}' must be an object.", p)
        if m.get("role") not in CHAT_ROLES:
            raise BodyError("invalid_value", f"'{p}.role' must be one of {list(CHAT_ROLES)}, got {m.get('role')!r}.",
                       f"{p}.role")
        content = m.get("content")
        calls = m.get("tool_calls") if m["role"] == "assistant" else None
        if calls is not None and not (isinstance(calls, list) and all(
                isinstance(c, dict) and isinstance(c.get("function"), dict) for c in calls)):
            raise BodyError("invalid_value", f"'{p}.tool_calls' must be an array of function calls.",
                            f"{p}.tool_calls")
        if content is None and calls:
            content = ""            # an assistant turn that only called tools
        if isinstance(content, list):
            if not all(isinstance(c, dict) and c.get("type") == "text" and isinstance(c.get("text"), str)
                       for c in content):
                raise BodyError("invalid_value", f"'{p}.content' parts must be text parts.", f"{p}.content")
            content = "".join(c["text"] for c in content)
        if not isinstance(content, str):
            raise BodyError("invalid_value", f"'{p}.content' must be a string or an array of text parts.",
                       f"{p}.content")
        msg = {"role": "system" if m["role"] == "developer" else m["role"], "content": content}
        if calls:
            msg["tool_calls"] = calls
        if m["role"] == "tool" and isinstance(m.get("tool_call_id"), str):
            msg["tool_call_id"] = m["tool_call_id"]
        out.append(msg)
    return out


def utf8_len(s: str) -> int:
    return len(s) if s.isascii() else len(s.encode())
