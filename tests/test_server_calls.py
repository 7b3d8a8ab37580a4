"""The openai engine's reading of a server's answers, without a server: which failures hold a request
uncharged, which fail it alone, and what goes to SGLang's native /generate."""
from __future__ import annotations

import json

import pytest

from blendserve.worker.engines.base import GenRequest, SamplingParams
from blendserve.worker.engines.server import native
from blendserve.worker.engines.server.calls import Refused, Rejected, Unavailable, error_for
from blendserve.worker.engines.server.discovery import ServerInfo, known


@pytest.mark.parametrize(("status", "text", "kind"), [
    (503, "", Unavailable), (502, "bad gateway", Unavailable), (429, "", Unavailable), (404, "", Unavailable),
    (400, '{"error": {"message": "prompt too long"}}', Refused), (422, "", Refused),
    (500, "Traceback ...", Rejected), (500, '{"error": {"code": "internal_error"}}', Rejected),
    # SGLang's router: the server behind it could not be reached, or it has none to send to.
    (500, json.dumps({"error": {"type": "Internal Server Error", "code": "call_upstream_request_error"}}),
     Unavailable),
    (500, json.dumps({"error": {"code": "no_available_workers"}}), Unavailable),
])
def test_what_each_answer_means(status: int, text: str, kind: type) -> None:
    assert type(error_for(status, text)) is kind


def test_figures_read_after_an_outage_keep_the_old_where_none_came() -> None:
    old = ServerInfo("m", "sglang", kv_tokens=4096, running_cap=6, step_tokens=2048)
    assert known(ServerInfo("m", "sglang"), old) == old
    assert known(ServerInfo("m", "sglang", kv_tokens=8192), old).kv_tokens == 8192
    assert known(None, old) is old


def test_sglang_native_body_and_the_stop_token() -> None:
    req = GenRequest(1, [5, 6, 7], SamplingParams(max_tokens=4, temperature=0.0, top_p=0.0, logprobs=2))
    body = native.body(req, 49152, stream=True)
    assert body["input_ids"] == [5, 6, 7] and body["stream"] is True
    assert body["sampling_params"]["top_k"] == 1 and body["sampling_params"]["top_p"] == 1.0
    assert body["return_logprob"] is True and body["top_logprobs_num"] == 2
    with pytest.raises(Refused, match="outside the model's vocabulary"):
        native.body(GenRequest(2, [5], SamplingParams(max_tokens=1, logit_bias=((60000, 1.0),))), 49152, False)
    # SGLang keeps the token that ended the output among its ids; OpenAI's output has none.
    assert native.without_stop_token([9, 8, 2], {"type": "stop", "matched": 2}) == [9, 8]
    assert native.without_stop_token([9, 8], {"type": "stop", "matched": "Paris"}) == [9, 8]
    assert native.without_stop_token([9, 2], {"type": "length", "length": 2}) == [9, 2]
