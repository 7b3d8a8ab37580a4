"""The typed request models alone: one parse per body, what it derives, what a row stores, and what a worker
reads back from it."""
from __future__ import annotations

import pytest

from blendserve.protocol.embeddings import EmbedModelInfo
from blendserve.protocol.fields import BodyError, ModelInfo
from blendserve.protocol.requests import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
    ResponsesRequest,
    parse,
    stored,
)
from blendserve.protocol.results import result_body
from blendserve.protocol.sampling import SamplingParams
from blendserve.worker.engines.base import GenResult

INFO = ModelInfo("m", 100, render_chat=lambda messages, tools=None: "x", encode=lambda t: [[1] for _ in t],
                 encode_prompt=lambda t: [[1] for _ in t], vocab_size=50)
EMBED = EmbedModelInfo("e", 8, render_chat=lambda m: "", encode=lambda t: [[1] for _ in t],
                       encode_prompt=lambda t: [[1] for _ in t], task="embed", dimensions=4, vocab_size=50)
USER = [{"role": "user", "content": "Hi"}]
WEATHER = {"type": "function", "function": {"name": "weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def refused(endpoint: str, body: object, info: ModelInfo = INFO, interactive: bool = False) -> tuple:
    with pytest.raises(BodyError) as e:
        parse(endpoint, body, info, interactive)
    return e.value.code, e.value.message, e.value.param


def test_a_chat_body_is_parsed_once_into_what_the_rules_derived() -> None:
    req = parse("/v1/chat/completions", {"model": "m", "messages": [{"role": "developer", "content": [
        {"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}]}, *USER], "max_tokens": 9,
        "max_completion_tokens": 5, "temperature": 0, "stop": "\n", "user": "u-1", "seed": None}, INFO)
    assert isinstance(req, ChatCompletionRequest)
    assert req.chat == [{"role": "system", "content": "Be brief."}, *USER]
    assert req.max_output == 5                  # max_completion_tokens wins over the deprecated max_tokens
    assert req.sampling_params(5) == SamplingParams(max_tokens=5, temperature=0.0, stop=("\n",))
    assert req.tool_call() is None


def test_a_row_stores_what_the_caller_set_less_the_prompt() -> None:
    req = parse("/v1/chat/completions", {"model": "m", "messages": USER, "seed": None, "user": "u-1",
                                         "logit_bias": {"7": -100}}, INFO)
    params = req.params()
    assert params == {"model": "m", "seed": None, "user": "u-1", "logit_bias": {"7": -100.0}}
    back = stored("/v1/chat/completions", params)
    assert back.sampling_params(3) == req.sampling_params(3) == SamplingParams(3, logit_bias=((7, -100.0),))


def test_the_rules_keep_openais_messages_and_params() -> None:
    chat = "/v1/chat/completions"
    assert refused(chat, ["not", "an", "object"]) == ("invalid_value", "The request body must be a JSON object.",
                                                      None)
    assert refused(chat, {"model": "m", "messages": USER, "frobnicate": 1}) == (
        "unsupported_parameter", "Unrecognized request argument supplied: 'frobnicate'.", "frobnicate")
    assert refused(chat, {"model": "m", "messages": USER, "stream": True})[0] == "stream_unsupported"
    assert refused(chat, {"model": "m", "messages": [{"role": "robot", "content": "x"}]})[2] == "messages[0].role"
    assert refused(chat, {"model": "m", "messages": USER, "max_tokens": 0})[2] == "max_tokens"


def test_a_value_the_rules_let_through_but_the_field_does_not_take_is_a_400() -> None:
    """The rules leave `model` to the envelope (a batch line) or the API (a call); typed, it is a string."""
    assert refused("/v1/chat/completions", {"model": 7, "messages": USER}, interactive=True) == (
        "invalid_value", "'model': Input should be a valid string.", "model")


def test_an_interactive_call_may_stream() -> None:
    body = {"model": "m", "messages": USER, "stream": True, "stream_options": {"include_usage": True}}
    assert parse("/v1/chat/completions", body, INFO, interactive=True).stream is True
    assert refused("/v1/chat/completions", {**body, "stream": "yes"}, interactive=True)[2] == "stream"
    assert refused("/v1/chat/completions", {**body, "stream": False}, interactive=True)[2] == "stream_options"


def test_a_completions_prompt_is_text_or_token_ids() -> None:
    text = parse("/v1/completions", {"model": "m", "prompt": ["Once"]}, INFO)
    assert isinstance(text, CompletionRequest)
    assert (text.text, text.prompt_ids, text.max_output) == ("Once", None, 16)
    ids = parse("/v1/completions", {"model": "m", "prompt": [3, 4], "max_tokens": 2, "logprobs": 2}, INFO)
    assert (ids.text, ids.prompt_ids, ids.max_output) == (None, [3, 4], 2)
    assert ids.sampling_params(2).logprobs == 2
    batch = refused("/v1/completions", {"model": "m", "prompt": [3, 50]})
    call = refused("/v1/completions", {"model": "m", "prompt": [3, 50]}, interactive=True)
    assert batch[1].endswith("below the vocabulary size, 50 (one prompt per line).")
    assert call[1].endswith("below the vocabulary size, 50.")


def test_a_forced_tool_call_is_the_models() -> None:
    req = parse("/v1/chat/completions", {"model": "m", "messages": USER, "tools": [WEATHER],
                                         "tool_choice": {"type": "function", "function": {"name": "weather"}}}, INFO)
    assert req.tool_call().name == "weather"
    assert req.sampling_params(4).json_schema is not None
    assert stored("/v1/chat/completions", req.params()).tool_call() == req.tool_call()


def test_an_embeddings_body_carries_its_inputs() -> None:
    req = parse("/v1/embeddings", {"model": "e", "input": ["a", "b"], "encoding_format": "base64"}, EMBED)
    assert isinstance(req, EmbeddingRequest)
    assert req.inputs.texts == ["a", "b"] and req.sampling_params() == SamplingParams(max_tokens=0)
    assert refused("/v1/embeddings", {"model": "m", "input": "a"})[1].endswith("it is not an embedding model.")
    assert refused("/v1/embeddings", {"model": "e", "input": "a", "dimensions": 3}, EMBED)[2] == "dimensions"


def test_a_responses_body_samples_as_its_chat() -> None:
    req = parse("/v1/responses", {"model": "m", "input": "Hi", "instructions": "Be brief.", "temperature": 0.5,
                                  "max_output_tokens": 7, "text": {"format": {"type": "json_object"}},
                                  "include": ["message.output_text.logprobs"], "top_logprobs": 2}, INFO)
    assert isinstance(req, ResponsesRequest)
    assert req.chat == [{"role": "system", "content": "Be brief."}, *USER] and req.max_output == 7
    assert req.sampling_params(7) == SamplingParams(7, temperature=0.5, json_schema='{"type": "object"}', logprobs=2)
    assert "input" not in req.params() and req.params()["instructions"] == "Be brief."
    assert refused("/v1/responses", {"model": "m", "input": "Hi", "stream": True})[0] == "stream_unsupported"
    assert parse("/v1/responses", {"model": "m", "input": "Hi", "stream": True}, INFO, interactive=True).stream


def test_result_bodies_are_built_from_the_typed_request() -> None:
    res = GenResult(1, [5, 6], '{"city": "Paris"}', "stop", prompt_tokens=3, cached_tokens=0)
    chat = parse("/v1/chat/completions", {"model": "m", "messages": USER, "tools": [WEATHER],
                                          "tool_choice": "required"}, INFO)
    body = result_body("m", res, chat)
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["tool_calls"][0]["function"] == {"name": "weather",
                                                                          "arguments": '{"city": "Paris"}'}
    plain = result_body("m", res, parse("/v1/completions", {"model": "m", "prompt": "x"}, INFO))
    assert plain["object"] == "text_completion" and plain["usage"]["completion_tokens"] == 2
    resp = result_body("m", res, stored("/v1/responses", {"model": "m", "metadata": {"k": "v"}, "top_p": 0.5}))
    assert (resp["object"], resp["metadata"], resp["top_p"], resp["status"]) == ("response", {"k": "v"}, 0.5,
                                                                                   "completed")


def test_a_batch_line_is_parsed_once_and_its_row_stores_the_models_params() -> None:
    from blendserve.scheduler.validation import ValidRequest, validate

    line = b'{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "m", ' \
           b'"messages": [{"role": "user", "content": "Hi"}], "max_completion_tokens": 4, "temperature": 1, ' \
           b'"metadata": {"k": "v"}}}'
    [r] = validate([line], "/v1/chat/completions", {"m": INFO}, max_lines=10)
    assert isinstance(r, ValidRequest) and isinstance(r.request, ChatCompletionRequest)
    assert r.max_tokens == 4 and r.request.chat == USER
    assert r.params() == {"model": "m", "max_completion_tokens": 4, "temperature": 1.0, "metadata": {"k": "v"}}
