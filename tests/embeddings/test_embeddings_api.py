"""/v1/embeddings end to end with the real `openai` SDK: interactively and in a batch (files + batches), on
SQLite and PostgreSQL, all-MiniLM-L6-v2 served beside a generation model."""
from __future__ import annotations

import base64
import re

import numpy as np
import openai
import pytest

from blendserve.core.embedstore import MINILM
from tests.conftest import TINY
from tests.live import read_lines, run_batch

TEXTS = ["The cat sits on the mat.", "A feline rests on a rug.", "Quarterly revenue rose by 4%."]


def _cos(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


@pytest.fixture(scope="module")
def reference(minilm) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm), device="cpu").encode(TEXTS)


def test_strings_match_sentence_transformers(embed_deployment, reference) -> None:
    c = embed_deployment.client()
    one = c.embeddings.create(model=MINILM, input=TEXTS[0])
    assert one.object == "list" and one.model == MINILM and len(one.data) == 1
    assert one.data[0].object == "embedding" and one.data[0].index == 0 and len(one.data[0].embedding) == 384
    many = c.embeddings.create(model=MINILM, input=TEXTS)
    assert [d.index for d in many.data] == [0, 1, 2]
    for d, ref in zip(many.data, reference):
        assert _cos(d.embedding, ref) >= 0.999
    assert _cos(many.data[0].embedding, many.data[1].embedding) > _cos(many.data[0].embedding, many.data[2].embedding)
    assert many.usage.prompt_tokens == many.usage.total_tokens > one.usage.prompt_tokens > 2


def test_token_ids_and_base64(embed_deployment, minilm) -> None:
    from blendserve.protocol.embeddings import embed_model_info

    c = embed_deployment.client()
    ids = embed_model_info("m", minilm).encode(TEXTS[:2])
    by_text = c.embeddings.create(model=MINILM, input=TEXTS[:2])
    by_ids = c.embeddings.create(model=MINILM, input=ids)
    single = c.embeddings.create(model=MINILM, input=ids[0])
    assert by_ids.usage.prompt_tokens == by_text.usage.prompt_tokens == len(ids[0]) + len(ids[1])
    for a, b in zip(by_ids.data, by_text.data):
        assert _cos(a.embedding, b.embedding) > 0.99999
    assert _cos(single.data[0].embedding, by_text.data[0].embedding) > 0.99999
    b64 = c.embeddings.create(model=MINILM, input=TEXTS[:2], encoding_format="base64", dimensions=384)
    for a, b in zip(b64.data, by_text.data):
        raw = a.embedding if isinstance(a.embedding, str) else None
        vec = np.frombuffer(base64.b64decode(raw), dtype="<f4") if raw else np.asarray(a.embedding)
        assert vec.shape == (384,) and np.allclose(vec, b.embedding, atol=1e-6)


@pytest.mark.parametrize("kwargs, param", [
    ({"input": "x", "dimensions": 128}, "dimensions"),
    ({"input": ""}, "input[0]"),
    ({"input": []}, "input"),
    ({"input": ["ok", [1, 2]]}, "input"),
    ({"input": [[101, 10**6, 102]]}, "input[0]"),
    ({"input": "word " * 300}, "input[0]"),        # 302 tokens: past MiniLM's 256
    ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
])
def test_bad_bodies_are_400s_naming_the_parameter(embed_deployment, kwargs, param) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        embed_deployment.client().embeddings.create(model=MINILM, **kwargs)
    assert e.value.body["param"] == param


def test_each_model_serves_only_its_endpoints(embed_deployment) -> None:
    c = embed_deployment.client()
    with pytest.raises(openai.BadRequestError, match="not an embedding model"):
        c.embeddings.create(model=TINY, input="x")
    with pytest.raises(openai.BadRequestError, match="embedding model"):
        c.chat.completions.create(model=MINILM, messages=[{"role": "user", "content": "hi"}])


def test_batch_of_embeddings(embed_deployment, reference, minilm) -> None:
    from blendserve.protocol.embeddings import embed_model_info

    c = embed_deployment.client()
    ids = embed_model_info("m", minilm).encode(TEXTS[:1])[0]
    bodies = [{"input": TEXTS[0]}, {"input": TEXTS}, {"input": ids, "encoding_format": "base64"},
              {"input": [ids, ids]}] + [{"input": f"line {i}: {TEXTS[i % 3]}"} for i in range(12)]
    rows = [{"custom_id": f"e{i}", "method": "POST", "url": "/v1/embeddings", "body": {"model": MINILM, **b}}
            for i, b in enumerate(bodies)]
    b = run_batch(c, rows, endpoint="/v1/embeddings")
    assert b.status == "completed", b.errors
    assert b.request_counts.completed == len(rows) and b.request_counts.failed == 0
    out = {x["custom_id"]: x["response"] for x in read_lines(c, b.output_file_id)}
    assert all(r["status_code"] == 200 for r in out.values())
    assert _cos(out["e0"]["body"]["data"][0]["embedding"], reference[0]) >= 0.999
    data = out["e1"]["body"]["data"]
    assert [d["index"] for d in data] == [0, 1, 2]
    assert min(_cos(d["embedding"], r) for d, r in zip(data, reference)) >= 0.999
    vec = np.frombuffer(base64.b64decode(out["e2"]["body"]["data"][0]["embedding"]), dtype="<f4")
    assert _cos(vec, reference[0]) >= 0.999
    assert out["e3"]["body"]["usage"]["prompt_tokens"] == 2 * len(ids)
    assert out["e0"]["body"]["usage"]["prompt_tokens"] == len(ids)
    assert b.usage.input_tokens == sum(x["body"]["usage"]["prompt_tokens"] for x in out.values())
    # Planned as prefill only: no warm-up sample (there is no output length to learn), no decode token.
    log = embed_deployment.log("scheduler", tail=None)
    policy = re.findall(rf"{MINILM}: (\d+) request\(s\), \d+ history, (\d+) warm-up", log)
    assert policy and all(int(n) > 0 and warm == "0" for n, warm in policy), policy
    rounds = re.findall(rf"planned \d+ request\(s\) of {MINILM}.*?(\d+) prefill \+ (\d+) decode tokens", log)
    assert rounds and all(int(p) > 0 and d == "0" for p, d in rounds), rounds


def test_bad_lines_fail_alone(embed_deployment) -> None:
    c = embed_deployment.client()
    rows = [{"custom_id": "ok", "method": "POST", "url": "/v1/embeddings", "body": {"model": MINILM, "input": "x"}},
            {"custom_id": "bad", "method": "POST", "url": "/v1/embeddings",
             "body": {"model": MINILM, "input": "x", "dimensions": 64}}]
    b = run_batch(c, rows, endpoint="/v1/embeddings")
    [err] = read_lines(c, b.error_file_id)
    assert b.status == "completed" and b.request_counts.completed == 1
    assert err["custom_id"] == "bad" and err["response"]["body"]["error"]["param"] == "dimensions"
    rows = [{"custom_id": "chat", "method": "POST", "url": "/v1/embeddings", "body": {"model": TINY, "input": "x"}}]
    b = run_batch(c, rows, endpoint="/v1/embeddings")
    [err] = read_lines(c, b.error_file_id)
    assert b.status == "completed" and "not an embedding model" in err["response"]["body"]["error"]["message"]
