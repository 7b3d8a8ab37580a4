"""Structured output, logprobs and n > 1 on the vLLM engine (CPU), through the same SamplingParams the worker
builds from a request body: every finished output validates, logprobs come in OpenAI's entries, n choices come
back as one result whose usage sums them."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema_rs
import pytest

from blendserve.core.modelstore import load_tokenizer
from blendserve.protocol.requests import sampling_params, stored
from blendserve.protocol.responses_api import LOGPROBS, chat_params
from blendserve.protocol.results import response_body, result_body
from blendserve.worker.engines.base import GenRequest, SamplingParams
from blendserve.worker.engines.vllm import VllmEngine

pytest.importorskip("vllm", reason="vllm is not installed in this interpreter (scripts/setup_vllm.sh installs it)")

LABEL = {"type": "object", "additionalProperties": False, "required": ["label", "ok"],
         "properties": {"label": {"enum": ["pos", "neg"]}, "ok": {"type": "boolean"}}}


def test_structured_logprobs_and_n(engine: VllmEngine, smollm2_checkpoint: Path) -> None:
    tok = load_tokenizer(smollm2_checkpoint)
    text = tok.apply_chat_template([{"role": "user", "content": "Is this review positive? 'Great food.'"}],
                                   add_generation_prompt=True, tokenize=False)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    bodies = {1: {"response_format": {"type": "json_schema", "json_schema": {"name": "l", "schema": LABEL,
                                                                             "strict": True}}, "temperature": 0},
              2: {"logprobs": True, "top_logprobs": 3, "temperature": 0},
              3: {"n": 3, "seed": 7, "temperature": 1.0}}
    out = {r.key: r for r in engine.generate([GenRequest(k, ids, sampling_params(b, 24)) for k, b in bodies.items()])}
    jsonschema_rs.validate(LABEL, json.loads(out[1].text))
    body = response_body("/v1/chat/completions", "m", out[2])
    content = body["choices"][0]["logprobs"]["content"]
    assert len(content) == len(out[2].output_ids) - (out[2].finish_reason == "stop")
    assert all(len(e["top_logprobs"]) == 3 and e["logprob"] <= 0 for e in content)
    assert content[0]["logprob"] == pytest.approx(content[0]["top_logprobs"][0]["logprob"], abs=1e-4)
    three = response_body("/v1/chat/completions", "m", out[3])
    assert [c["index"] for c in three["choices"]] == [0, 1, 2]
    assert three["usage"]["completion_tokens"] == sum(len(r.output_ids) for r in [out[3], *out[3].choices])


# Keys in reverse alphabetical order: an engine that sorted them would show it.
ORDERED = {"type": "object", "additionalProperties": False, "required": ["zeta", "mid", "alpha"],
           "properties": {"zeta": {"type": "integer"}, "mid": {"enum": ["x", "y"]}, "alpha": {"type": "boolean"}}}


def ordered_requests(ids: list[int], n: int = 6) -> list[GenRequest]:
    fmt = {"type": "json_schema", "json_schema": {"name": "o", "schema": ORDERED, "strict": True}}
    return [GenRequest(k, ids, sampling_params({"response_format": fmt, "temperature": 1.0, "seed": k}, 40))
            for k in range(n)]


def assert_schema_order(results) -> None:
    finished = [json.loads(r.text) for r in results if r.finish_reason == "stop"]
    assert len(finished) >= len(results) // 2, results
    assert all(list(doc) == ["zeta", "mid", "alpha"] for doc in finished), finished


def test_outputs_keep_the_schemas_key_order(engine: VllmEngine, smollm2_checkpoint: Path) -> None:
    tok = load_tokenizer(smollm2_checkpoint)
    text = tok.apply_chat_template([{"role": "user", "content": "Fill in the form."}], add_generation_prompt=True,
                                   tokenize=False)
    assert_schema_order(list(engine.generate(ordered_requests(tok(text, add_special_tokens=False)["input_ids"]))))


def test_responses_forced_call_and_logprobs(engine: VllmEngine, smollm2_checkpoint: Path) -> None:
    """A Responses body goes through the same translation as on the CPU engine: a forced call generated under
    its function's schema, logprobs in output_text's shape."""
    from openai.types.responses import Response

    tok = load_tokenizer(smollm2_checkpoint)
    text = tok.apply_chat_template([{"role": "user", "content": "Label: 'Great food.'"}], add_generation_prompt=True,
                                   tokenize=False)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    tool = {"type": "function", "name": "label", "parameters": LABEL, "strict": True}
    bodies = {1: {"model": "m", "input": "x", "tools": [tool], "tool_choice": "required", "temperature": 0},
              2: {"model": "m", "input": "x", "include": [LOGPROBS], "top_logprobs": 2, "temperature": 0}}
    out = {r.key: r for r in engine.generate([GenRequest(k, ids, sampling_params(chat_params(b), 64))
                                              for k, b in bodies.items()])}
    call = Response.model_validate(result_body("m", out[1], stored("/v1/responses", bodies[1]))).output[0]
    assert (call.type, call.name) == ("function_call", "label"), out[1]
    assert out[1].finish_reason == "stop", out[1]
    jsonschema_rs.validate(LABEL, json.loads(call.arguments))
    text = Response.model_validate(result_body("m", out[2], stored("/v1/responses", bodies[2]))).output[0].content[0]
    assert len(text.logprobs) == len(out[2].output_ids) - (out[2].finish_reason == "stop")
    assert all(len(e.top_logprobs) == 2 and e.logprob <= 0 for e in text.logprobs)


def _computed(engine: VllmEngine) -> float:
    """vLLM's own count of prompt tokens it prefilled (not served from its prefix cache)."""
    return sum(m.value for m in engine._engine.get_metrics()
               if m.name == "vllm:prompt_tokens_by_source" and m.labels.get("source") == "local_compute")


def test_n_choices_prefill_a_2000_token_prompt_once(engine: VllmEngine) -> None:
    """n = 8 on a 2,000-token prompt: vLLM's counters show about 2,000 prompt tokens computed, not 16,000 (its
    parallel sampling fans out to 8 requests; all but the first find the prompt's blocks in the prefix cache)."""
    import random

    ids = [random.Random(8).randrange(100, 40000) for _ in range(2000)]    # shares no block with other tests
    before = _computed(engine)
    (result,) = engine.generate([GenRequest(8, ids, SamplingParams(max_tokens=4, temperature=1.0, seed=3, n=8))])
    computed = _computed(engine) - before
    assert len(result.choices) == 7 and result.completion_tokens == 32
    # Each later choice recomputes at most its last partial block (32 tokens) and its last token.
    assert 2000 <= computed <= 2000 + 7 * 32, computed
