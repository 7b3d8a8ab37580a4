"""vLLM's sampling fields on both paths, without vLLM: `top_p: 0` (OpenAI's likeliest token only) is top_k 1."""
from __future__ import annotations

from worker.engines.base import GenRequest, SamplingParams
from worker.engines.server.calls import body
from worker.engines.vllm_args import nucleus


def test_top_p_zero_is_the_likeliest_token() -> None:
    assert nucleus(SamplingParams(8, top_p=0.0)) == {"top_p": 1.0, "top_k": 1}
    assert nucleus(SamplingParams(8, top_p=0.5)) == {"top_p": 0.5}


def test_the_server_body_never_sends_vllm_a_top_p_of_zero() -> None:
    req = GenRequest(1, [5, 6], SamplingParams(max_tokens=4, temperature=0.7, top_p=0.0))
    sent = body(req, "m", "vllm", False, True)
    assert (sent["top_p"], sent["top_k"], sent["temperature"]) == (1.0, 1, 0.7)
    assert body(req, "m", "openai", False, True)["top_p"] == 0.0      # OpenAI's own API takes it as is
