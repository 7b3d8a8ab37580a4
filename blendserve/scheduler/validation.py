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
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from blendserve.protocol import embeddings
from blendserve.protocol.answer_size import check_answer, top_of
from blendserve.protocol.bodies import render, tokenize
from blendserve.protocol.fields import SPECIAL_MARGIN, BodyError, ModelInfo, token_id_error, utf8_len
from blendserve.protocol.nesting import MAX_DEPTH, TooDeep, check_depth
from blendserve.protocol.requests import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
    RequestBody,
    parse,
)
from blendserve.protocol.structured import auto_tools

MAX_ERRORS = 100


@dataclass
class LineError:
    """A line that cannot run. With a `custom_id` it is the request's own failure (its parameters, its
    prompt's length, its model): that request's error-file line, while the rest of the batch runs. Without
    one it is the file's (not JSON, a missing or wrong custom_id, method or url, a duplicate id, a second
    model, the size limits): the batch fails validation, as OpenAI fails a malformed file."""
    line: int
    code: str
    message: str
    param: str | None = None
    custom_id: str | None = None
    model: str | None = None

    @property
    def fails_file(self) -> bool:
        return self.custom_id is None

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
    request: RequestBody | None = None     # the body parsed (None: a row read back to count its prompt)

    def params(self) -> dict:
        """The parameters a row stores, less its prompt: what the workers need besides the token ids."""
        return self.request.params()


def _slow_loads(raw: bytes) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BodyError("invalid_utf8", "The line is not valid UTF-8.") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise BodyError("invalid_json_line", f"The line is not valid JSON: {e.msg}.") from None
    except RecursionError:
        raise TooDeep(text) from None
    try:
        json.dumps(obj, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        raise BodyError("invalid_value",
                        "The line holds an unpaired UTF-16 surrogate escape (\\ud800-\\udfff).") from None
    return obj


@dataclass
class _Envelope:
    """A line whose format passed: what the file-level checks leave for the request-level ones."""
    custom_id: str
    body: dict
    model: str
    brackets: int = 0        # '[' and '{' in the line's text: at most this deep, so most lines skip the walk


def _check_envelope(raw: bytes, endpoint: str, models: dict[str, ModelInfo], seen: set[str],
                    batch_model: list[str]) -> _Envelope:
    """The checks whose failure fails the whole file (OpenAI's own file validation)."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        obj = _slow_loads(raw)      # the standard library's message, or a number orjson refuses (> 64 bits)
    if not isinstance(obj, dict):
        raise BodyError("invalid_json_line", "The line must be a JSON object.")
    for key in ("custom_id", "method", "url", "body"):
        if key not in obj:
            raise BodyError("missing_required_parameter", f"Missing required parameter: '{key}'.", key)
    cid = obj["custom_id"]
    if not isinstance(cid, str) or not cid or len(cid) > 512:
        raise BodyError("invalid_value", "'custom_id' must be a non-empty string of at most 512 characters.",
                        "custom_id")
    if "\x00" in cid:      # PostgreSQL text cannot hold NUL; OpenAI's ids never need one
        raise BodyError("invalid_value", "'custom_id' must not contain a NUL character (\\u0000).", "custom_id")
    if cid in seen:
        raise BodyError("duplicate_custom_id", f"The custom_id '{cid}' appears more than once in the file.",
                        "custom_id")
    seen.add(cid)
    if obj["method"] != "POST":
        raise BodyError("invalid_method", f"'method' must be 'POST', got {obj['method']!r}.", "method")
    if obj["url"] != endpoint:
        raise BodyError("mismatched_endpoint", f"'url' {obj['url']!r} does not match the batch endpoint '{endpoint}'.",
                        "url")
    body = obj["body"]
    if not isinstance(body, dict):
        raise BodyError("invalid_value", "'body' must be a JSON object.", "body")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BodyError("missing_required_parameter", "Missing required parameter: 'body.model'.", "body.model")
    if model in models:
        if batch_model and model != batch_model[0]:
            raise BodyError("mismatched_model", f"Every line must use the same model: '{batch_model[0]}' on an "
                            f"earlier line, '{model}' here.", "body.model")
        batch_model[:1] = [model]
    return _Envelope(cid, body, model, raw.count(b"[") + raw.count(b"{"))


def _check_request(env: _Envelope, lineno: int, endpoint: str, models: dict[str, ModelInfo],
                   skeletons: dict[tuple, int]) -> ValidRequest:
    """The checks whose failure is the request's own: its error-file line, the rest of the batch runs. The
    body is parsed once, into its endpoint's request model (blendserve/protocol/requests.py)."""
    cid, body, model = env.custom_id, env.body, env.model
    if env.brackets > MAX_DEPTH:     # deeper than any OpenAI body; orjson would not store its parameters
        check_depth(body, "body")
    if model not in models:
        raise BodyError("model_not_found", f"The model '{model}' is not served here; served: {sorted(models)}.",
                        "body.model")
    info = models[model]
    if endpoint != embeddings.ENDPOINT and info.task == "embed":
        raise BodyError("invalid_value", f"'{model}' is an embedding model: it serves only {embeddings.ENDPOINT}.",
                        "body.model")
    req = parse(endpoint, body, info)
    if isinstance(req, EmbeddingRequest):      # prefill only: max_tokens 0, no decode step
        if req.inputs.ids is not None:
            return ValidRequest(lineno, cid, body, model, 0, prompt_ids=embeddings.join(req.inputs.ids), request=req)
        return ValidRequest(lineno, cid, body, model, 0, bound=embeddings.bound(req.inputs), request=req)
    check_answer(getattr(req, "n", 1), req.max_output, top_of(getattr(req, "logprobs", None),    # the API's bounds
                 getattr(req, "top_logprobs", None)), info.context_length, info.answer)      # on one answer
    if isinstance(req, CompletionRequest):
        if req.prompt_ids is not None:
            return ValidRequest(lineno, cid, body, model, req.max_output, prompt_ids=req.prompt_ids, request=req)
        return ValidRequest(lineno, cid, body, model, req.max_output, bound=utf8_len(req.text) + SPECIAL_MARGIN,
                            request=req)
    roles = tuple(m["role"] for m in req.chat)
    if roles not in skeletons:      # the template's own bytes for this sequence of roles
        try:
            skeletons[roles] = len(info.render_chat([{"role": r, "content": "x"} for r in roles]).encode())
        except Exception as e:      # templates may refuse some orders of roles (no alternation, ...)
            raise BodyError("invalid_value", f"The model's chat template refuses these messages: {e}",
                            "messages") from e
    bound = skeletons[roles] + sum(map(utf8_len, (m["content"] for m in req.chat))) + SPECIAL_MARGIN
    if isinstance(req, ChatCompletionRequest) and auto_tools(body):     # the template lists the tools too
        bound = utf8_len(render(req.chat, req.tools, req.tool_choice, info)) + SPECIAL_MARGIN
    return ValidRequest(lineno, cid, body, model, req.max_output, bound=bound, request=req)


def tokenize_each(endpoint: str, bodies: list[dict], info: ModelInfo) -> list[list[int] | Exception]:
    """`tokenize` in one call, or, where it raises, one body at a time: the exception stands for the
    bodies that raised, so one prompt a tokenizer or template refuses fails only its own request."""
    try:
        return tokenize(endpoint, bodies, info)
    except Exception:
        out: list[list[int] | Exception] = []
        for body in bodies:
            try:
                out.append(tokenize(endpoint, [body], info)[0])
            except Exception as e:
                out.append(e)
        return out


def read_body(line: bytes) -> dict:
    """The body of a line that passed validation, read back from the input file."""
    try:
        return orjson.loads(line)["body"]
    except orjson.JSONDecodeError:
        return json.loads(line)["body"]         # a number orjson refuses, as in _check_envelope


def context_error(r: ValidRequest, info: ModelInfo) -> LineError | None:
    """Fill in a missing max_tokens from the exact prompt length, or say why the request cannot fit."""
    if info.task == "embed":        # each input must fit on its own; nothing is generated
        err = embeddings.context_error(r.prompt_ids, info)
        return LineError(r.line, err.code, err.message, err.param, r.custom_id, r.model) if err else None
    if (bad := token_id_error(r.prompt_ids, info.vocab_size)) is not None:   # ids go to the engine as int32
        return LineError(r.line, "invalid_value", bad, "body", r.custom_id, r.model)
    n = len(r.prompt_ids)
    if n + (r.max_tokens or 1) > info.context_length:
        return LineError(r.line, "context_length_exceeded",
                         f"The prompt ({n} tokens) plus max_tokens ({r.max_tokens}) exceeds the model's context "
                         f"length of {info.context_length} tokens.", "body", r.custom_id, r.model)
    if r.max_tokens is None:
        r.max_tokens = info.context_length - n
    return None


def _envelope_error(e: BodyError, lineno: int, seen: set[str]) -> LineError:
    """The file's error; a line too deep to parse whose custom_id is known and new is that request's own."""
    cid = getattr(e, "custom_id", None)
    own = cid is not None and cid not in seen and not seen.add(cid)
    return LineError(lineno, e.code, e.message, e.param, cid if own else None)


def validate(lines: Iterable[bytes], endpoint: str, models: dict[str, ModelInfo], max_lines: int,
             group: int = 64) -> Iterator[ValidRequest | LineError]:
    """Yield each line's ValidRequest or LineError; valid lines come in line order.

    A LineError with a custom_id is the request's own (see LineError); the others fail the file.

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
        failed: dict[int, LineError] = {}
        if todo:
            info = models[todo[0].model]
            for r, ids in zip(todo, tokenize_each(endpoint, [r.body for r in todo], info)):
                if isinstance(ids, Exception):
                    failed[r.line] = LineError(r.line, "tokenization_failed",
                                               f"The prompt could not be tokenized: {ids}", None, r.custom_id, r.model)
                else:
                    r.prompt_ids = ids
        for r in pending:
            err = failed.get(r.line) or (context_error(r, models[r.model]) if r.prompt_ids is not None else None)
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
            env = _check_envelope(raw, endpoint, models, seen, batch_model)
        except BodyError as e:
            yield _envelope_error(e, lineno, seen)
            continue
        try:
            r = _check_request(env, lineno, endpoint, models, skeletons)
            r.offset, r.length = offset, len(raw)      # JSON parsers ignore the trailing newline
            pending.append(r)
        except BodyError as e:
            yield LineError(lineno, e.code, e.message, e.param, env.custom_id, env.model)
        if len(pending) >= group:
            yield from flush()
    yield from flush()
    if count == 0:
        yield LineError(1, "empty_file", "The input file has no requests.")
