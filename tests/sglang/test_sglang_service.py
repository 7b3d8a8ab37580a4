"""The whole service on SGLang's own engine (its CPU path): a batch, interactive chat plain and streamed,
a request SGLang cannot run failing alone, a cancel, and Ctrl-C + restart with every custom_id once."""
from __future__ import annotations

import signal
from pathlib import Path

import pytest

from blendserve.core.config import SMOLLM2
from tests.live import Deployment, chat_lines, jsonl, read_lines, run_batch, wait_batch
from tests.sglang.conftest import CPU_ENV

pytest.importorskip("sglang", reason="sglang is not installed in this interpreter (scripts/setup_sglang.sh)")

SYSTEM = "You are a patient tutor. Answer in one sentence and never ask questions back. " * 5
PARIS = [{"role": "user", "content": "Complete the sentence: The capital of France is"}]


@pytest.fixture(scope="module")
def sglang_deployment(tmp_path_factory: pytest.TempPathFactory, smollm2_checkpoint: Path):
    d = Deployment(tmp_path_factory.mktemp("bs-sglang"), "", f"{SMOLLM2}={smollm2_checkpoint}",
                   BLENDSERVE_LEASE_SECONDS="10", **CPU_ENV)
    for role in ("api", "scheduler"):
        d.start(role)
    d.start("worker", None, "--engine", "sglang")
    try:
        d.wait_ready(timeout=400)
        yield d
    finally:
        d.stop()


def test_batch_through_sglang_worker(sglang_deployment: Deployment) -> None:
    d = sglang_deployment
    # The shared system prompt enters SGLang's radix cache first (prompts prefilled in one step share none).
    warm = d.client().chat.completions.create(model=SMOLLM2, max_tokens=1,
                                              messages=[{"role": "user", "content": f"{SYSTEM}question"}])
    assert warm.usage.prompt_tokens > 100
    rows = chat_lines(6, SMOLLM2, max_tokens=12, prefix=SYSTEM, temperature=0)
    rows[0]["body"]["max_tokens"] = 1
    b = run_batch(d.client(), rows)
    assert b.status == "completed", d.log("worker")
    assert (b.request_counts.total, b.request_counts.completed, b.request_counts.failed) == (6, 6, 0)
    out = {line["custom_id"]: line["response"]["body"] for line in read_lines(d.client(), b.output_file_id)}
    assert sorted(out) == sorted(r["custom_id"] for r in rows)
    assert out["req-0"]["choices"][0]["finish_reason"] == "length"
    assert out["req-0"]["usage"]["completion_tokens"] == 1
    for body in out.values():
        assert body["choices"][0]["message"]["content"].strip()
        assert body["usage"]["prompt_tokens"] > 100
    # Every request shares the long system prompt: SGLang's radix cache serves it.
    cached = sorted(body["usage"]["prompt_tokens_details"]["cached_tokens"] for body in out.values())
    assert cached[0] >= 64
    assert b.usage.input_tokens_details.cached_tokens == sum(cached)


def test_interactive_chat_plain_and_streamed(sglang_deployment: Deployment) -> None:
    c = sglang_deployment.client()
    plain = c.chat.completions.create(model=SMOLLM2, messages=PARIS, max_tokens=16, temperature=0)
    text = plain.choices[0].message.content
    assert "Paris" in text and plain.usage.completion_tokens > 0
    chunks = list(c.chat.completions.create(model=SMOLLM2, messages=PARIS, max_tokens=16, temperature=0,
                                            stream=True, stream_options={"include_usage": True}))
    deltas = [ch.choices[0].delta.content for ch in chunks if ch.choices and ch.choices[0].delta.content]
    assert len(deltas) > 1                         # tokens arrive as SGLang makes them, not all at the end
    assert "".join(deltas) == text
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens


def test_a_request_sglang_cannot_run_fails_alone(sglang_deployment: Deployment) -> None:
    d = sglang_deployment
    rows = chat_lines(5, SMOLLM2, max_tokens=8, temperature=0)
    rows[1]["body"]["logit_bias"] = {"60000": 5}       # SmolLM2 has 49152 tokens: SGLang would raise
    rows[2]["body"]["top_p"] = 0                        # valid (OpenAI: the top token only); SGLang wants > 0
    b = run_batch(d.client(), rows)
    assert b.status == "completed", d.log("worker")
    assert (b.request_counts.completed, b.request_counts.failed) == (4, 1)
    err = read_lines(d.client(), b.error_file_id)
    assert [e["custom_id"] for e in err] == ["req-1"]
    # Refused at intake (the line's own 400, as OpenAI answers a logit_bias key the model does not have).
    assert err[0]["response"]["status_code"] == 400
    assert "vocabulary" in err[0]["response"]["body"]["error"]["message"]
    assert "engine stream failed" not in d.log("worker", tail=None)     # nothing else was charged a try


def test_cancel_stops_the_batch(sglang_deployment: Deployment) -> None:
    c = sglang_deployment.client()
    rows = chat_lines(24, SMOLLM2, max_tokens=64)
    f = c.files.create(file=("cancel.jsonl", jsonl(rows)), purpose="batch")
    b = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    wait_batch(c, b.id, until=lambda x: x.request_counts.completed >= 1, timeout=300)
    c.batches.cancel(b.id)
    done = wait_batch(c, b.id, timeout=120)
    assert done.status == "cancelled", done
    assert done.request_counts.completed < 24
    after = c.chat.completions.create(model=SMOLLM2, messages=PARIS, max_tokens=4, temperature=0)
    assert after.choices[0].message.content            # the worker serves on


def test_ctrl_c_and_restart_lose_nothing(sglang_deployment: Deployment) -> None:
    d = sglang_deployment
    c = d.client()
    rows = chat_lines(48, SMOLLM2, max_tokens=32)     # enough that a quiet machine is still mid-batch at 2 done
    f = c.files.create(file=("stop.jsonl", jsonl(rows)), purpose="batch")
    b = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    mid = wait_batch(c, b.id, until=lambda x: x.request_counts.completed >= 2, timeout=300)
    assert mid.request_counts.completed < len(rows)
    assert d.signal("worker", signal.SIGINT, group=True) < 30.0       # a terminal's Ctrl-C: the whole group
    d.start("worker", "worker2", "--engine", "sglang")
    d.wait_ready(timeout=400)
    done = wait_batch(c, b.id, timeout=400)
    assert done.status == "completed", d.log("worker2")
    out, err = read_lines(c, done.output_file_id), read_lines(c, done.error_file_id)
    assert err == [], err[:3]
    assert sorted(o["custom_id"] for o in out) == sorted(r["custom_id"] for r in rows)


def test_outputs_keep_the_schemas_key_order(sglang_deployment: Deployment) -> None:
    """Structured output on SGLang: every finished output writes its keys in the schema's order. Twelve
    sampled lines, of which some write an integer longer than max_tokens: SGLang applies a seed only under
    deterministic inference, so which ones is chance."""
    import json

    schema = {"type": "object", "additionalProperties": False, "required": ["zeta", "mid", "alpha"],
              "properties": {"zeta": {"type": "integer"}, "mid": {"enum": ["x", "y"]}, "alpha": {"type": "boolean"}}}
    rows = chat_lines(12, SMOLLM2, max_tokens=40, prefix="Fill in the form, ")
    for i, row in enumerate(rows):
        row["body"].update(temperature=1.0, seed=i, response_format={
            "type": "json_schema", "json_schema": {"name": "o", "schema": schema, "strict": True}})
    c = sglang_deployment.client()
    b = run_batch(c, rows)
    outs = [x["response"]["body"]["choices"][0] for x in read_lines(c, b.output_file_id)]
    finished = [json.loads(o["message"]["content"]) for o in outs if o["finish_reason"] == "stop"]
    assert len(finished) >= 3, outs
    assert all(list(doc) == ["zeta", "mid", "alpha"] for doc in finished), finished
