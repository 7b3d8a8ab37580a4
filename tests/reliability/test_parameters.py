"""Parameters are applied or refused with a per-line error, never silently dropped."""
from __future__ import annotations

import json

import pytest

from blendserve.protocol.bodies import model_info
from blendserve.scheduler.validation import LineError, ValidRequest, validate

CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def info(tiny_model):
    return model_info("m", tiny_model)


def check(info, **body) -> ValidRequest | LineError:
    raw = json.dumps({"custom_id": "r", "method": "POST", "url": CHAT,
                      "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}], **body}}).encode()
    [out] = list(validate([raw], CHAT, {"m": info}, 10))
    return out


@pytest.mark.parametrize("body", [
    {"prediction": {"type": "content", "content": "x"}},
    {"reasoning_effort": "high"},
    {"web_search_options": {}},
    {"stream_options": {"include_usage": True}},
    {"frobnicate": 1},
])
def test_parameters_no_engine_applies_are_refused(info, body):
    out = check(info, **body)
    assert isinstance(out, LineError) and out.code == "unsupported_parameter" and out.param == next(iter(body))
    assert out.line == 1


@pytest.mark.parametrize("body", [
    {"response_format": {"type": "text"}}, {"response_format": None}, {"reasoning_effort": None},
    {"response_format": {"type": "json_object"}},
    {"user": "u-1", "metadata": {"k": "v"}, "store": False, "service_tier": "auto"},
    {"logit_bias": {"42": -100, "7": 100, "0": 0.5}}, {"logit_bias": None}, {"logit_bias": {}},
    {"presence_penalty": 1.5, "frequency_penalty": -2.0}, {"stop": []},
])
def test_applied_or_descriptive_parameters_pass(info, body):
    assert isinstance(check(info, **body), ValidRequest)


@pytest.mark.parametrize("bias", [{"x": 1}, {"-1": 1}, {"1.5": 1}, {"3": 101}, {"3": -100.5}, {"3": "1"},
                                  {"3": True}, [1, 2], "bias", {"99999999999": 1}, {"99999999": 1}])
def test_logit_bias_is_validated(info, bias):
    out = check(info, logit_bias=bias)
    assert isinstance(out, LineError) and out.code == "invalid_value" and out.param == "logit_bias"


def test_nul_in_custom_id_is_refused(info):
    raw = json.dumps({"custom_id": "a\x00b", "method": "POST", "url": CHAT,
                      "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}}).encode()
    [out] = list(validate([raw], CHAT, {"m": info}, 10))
    assert isinstance(out, LineError) and out.code == "invalid_value" and out.param == "custom_id"
