"""Structured output, logprobs and n > 1 mapped onto SGLang's API: `json_schema` and `n` in its sampling params,
`return_logprob` / `top_logprobs_num` beside them, and its (logprob, id, text) lists back into OpenAI's entries."""
from __future__ import annotations

from blendserve.protocol.requests import sampling_params as from_body
from blendserve.worker.engines.base import SamplingParams
from blendserve.worker.engines.sglang_args import logprob_entries, logprob_kwargs, sampling_params


def test_schema_n_and_logprobs_map_to_sglang() -> None:
    p = from_body({"response_format": {"type": "json_object"}, "n": 3, "logprobs": True, "top_logprobs": 2}, 8)
    params = sampling_params(p, 100)
    assert params["json_schema"] == '{"type": "object"}' and params["n"] == 3
    assert logprob_kwargs(p) == {"return_logprob": True, "logprob_start_len": -1, "top_logprobs_num": 2,
                                 "return_text_in_logprobs": True}
    plain = SamplingParams(max_tokens=4)
    assert "json_schema" not in sampling_params(plain, 100) and "n" not in sampling_params(plain, 100)
    assert logprob_kwargs(plain) == {}


def test_sglang_logprobs_become_openailogprob_entries() -> None:
    meta = {"output_token_logprobs": [(-0.5, 7, "Hi"), (-1.25, 9, " é")],
            "output_top_logprobs": [[(-0.5, 7, "Hi"), (-2.0, 3, "Ho")], [(-1.0, 4, "!"), (-1.25, 9, " é")]]}
    entries = logprob_entries(meta)
    assert [(e.token, e.logprob) for e in entries] == [("Hi", -0.5), (" é", -1.25)]
    assert entries[1].bytes == list(" é".encode()) and [t.token for t in entries[1].top] == ["!", " é"]
    assert [e.token for e in logprob_entries(meta, 1)] == [" é"] and logprob_entries({}) is None
