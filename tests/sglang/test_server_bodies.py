"""What the worker in front of a server sends for a request's place: priorities where the server orders its
queue by them, none where it does not (SGLang may abort, vLLM refuses, a request with a priority then)."""
from __future__ import annotations

from blendserve.worker.engines.base import GenRequest, SamplingParams
from blendserve.worker.engines.server import native
from blendserve.worker.engines.server.calls import body
from blendserve.worker.engines.sglang_args import INTERACTIVE_PRIORITY


def test_priorities_reach_the_servers_that_order_by_them() -> None:
    """SGLang's /generate: interactive above every batch request, batch by place in the plan (higher first);
    vLLM's completions: the place itself (lower first). None: a server without priority scheduling."""
    req = GenRequest(1, [5, 6], SamplingParams(max_tokens=4))
    assert "priority" not in native.body(req, None, False)
    assert native.body(req, None, False, 7)["priority"] == -7
    assert native.body(req, None, True, -3)["priority"] == INTERACTIVE_PRIORITY
    assert body(req, "m", "vllm", False, True, 7)["priority"] == 7
    assert "priority" not in body(req, "m", "vllm", False, True)
