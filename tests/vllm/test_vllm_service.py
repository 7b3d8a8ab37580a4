"""The whole service with a vLLM worker: a batch through the OpenAI SDK, results and usage as the contract says."""
from __future__ import annotations

from pathlib import Path

import pytest

from blendserve.core.config import SMOLLM2
from tests.live import Deployment, chat_lines, read_lines, run_batch

pytest.importorskip("vllm", reason="vllm is not installed in this interpreter (scripts/setup_vllm.sh installs it)")

SYSTEM = "You are a patient tutor. Answer in one sentence and never ask questions back. " * 5


@pytest.fixture(scope="module")
def vllm_deployment(tmp_path_factory: pytest.TempPathFactory, smollm2_checkpoint: Path):
    d = Deployment(tmp_path_factory.mktemp("bs-vllm"), "", f"{SMOLLM2}={smollm2_checkpoint}")
    for role in ("api", "scheduler"):
        d.start(role)
    d.start("worker", None, "--engine", "vllm")
    try:
        d.wait_ready(timeout=300)
        yield d
    finally:
        d.stop()


def test_batch_through_vllm_worker(vllm_deployment: Deployment) -> None:
    rows = chat_lines(8, SMOLLM2, max_tokens=12, prefix=SYSTEM, temperature=0)
    rows[0]["body"]["max_tokens"] = 1
    b = run_batch(vllm_deployment.client(), rows)
    assert b.status == "completed", vllm_deployment.log("worker")
    assert (b.request_counts.total, b.request_counts.completed, b.request_counts.failed) == (8, 8, 0)
    out = {line["custom_id"]: line["response"]["body"]
           for line in read_lines(vllm_deployment.client(), b.output_file_id)}
    assert sorted(out) == sorted(r["custom_id"] for r in rows)
    assert out["req-0"]["choices"][0]["finish_reason"] == "length"
    assert out["req-0"]["usage"]["completion_tokens"] == 1
    for body in out.values():
        assert body["choices"][0]["message"]["content"].strip()
        assert body["usage"]["prompt_tokens"] > 100
    # Every request after the first shares the long prompt prefix: vLLM's prefix cache serves it.
    cached = sorted(body["usage"]["prompt_tokens_details"]["cached_tokens"] for body in out.values())
    assert cached[-1] >= 64 and sum(c > 0 for c in cached) >= 6
    assert b.usage.input_tokens_details.cached_tokens == sum(cached)
    assert "vllm" in vllm_deployment.log("worker", tail=None)
