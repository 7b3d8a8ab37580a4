"""End to end through a live server with the real openai SDK, on SQLite and PostgreSQL."""
from __future__ import annotations

import time

import openai
import pytest
from openai.types import Completion
from openai.types.chat import ChatCompletion

from tests.conftest import TINY
from tests.live import chat_lines, jsonl, read_lines, run_batch


def test_chat_batch_round_trip(deployment):
    c = deployment.client()
    rows = chat_lines(12, TINY, max_tokens=6, prefix="You are a helpful assistant. ")
    b = run_batch(c, rows, metadata={"job": "e2e"})
    assert b.status == "completed", b.errors
    assert b.request_counts.total == 12 and b.request_counts.completed == 12 and b.request_counts.failed == 0
    assert b.metadata == {"job": "e2e"}
    assert b.in_progress_at and b.finalizing_at and b.completed_at and b.error_file_id is None
    out = read_lines(c, b.output_file_id)
    assert sorted(o["custom_id"] for o in out) == sorted(r["custom_id"] for r in rows)
    prompt = completion = cached = 0
    for o in out:
        assert o["id"].startswith("batch_req_") and o["error"] is None
        assert o["response"]["status_code"] == 200 and o["response"]["request_id"].startswith("req_")
        cc = ChatCompletion.model_validate(o["response"]["body"])
        assert cc.object == "chat.completion" and cc.model == TINY
        assert cc.choices[0].finish_reason in ("stop", "length")
        assert 1 <= cc.usage.completion_tokens <= 6
        prompt += cc.usage.prompt_tokens
        completion += cc.usage.completion_tokens
        cached += cc.usage.prompt_tokens_details.cached_tokens
    assert b.usage.input_tokens == prompt and b.usage.output_tokens == completion
    assert b.usage.input_tokens_details.cached_tokens == cached > 0, "shared system prefix must hit the cache"
    assert b.usage.total_tokens == prompt + completion
    f = c.files.retrieve(b.output_file_id)
    assert f.purpose == "batch_output" and f.bytes == len(c.files.content(b.output_file_id).content)


def test_completions_endpoint(deployment):
    c = deployment.client()
    rows = [{"custom_id": f"c{i}", "method": "POST", "url": "/v1/completions",
             "body": {"model": TINY, "prompt": f"Once upon a time {i}", "max_tokens": 5, "temperature": 0}}
            for i in range(3)]
    rows.append({"custom_id": "ids", "method": "POST", "url": "/v1/completions",
                 "body": {"model": TINY, "prompt": [5, 6, 7, 8], "max_tokens": 3}})
    b = run_batch(c, rows, endpoint="/v1/completions")
    assert b.status == "completed", b.errors
    out = {o["custom_id"]: o for o in read_lines(c, b.output_file_id)}
    assert set(out) == {"c0", "c1", "c2", "ids"}
    for o in out.values():
        comp = Completion.model_validate(o["response"]["body"])
        assert comp.object == "text_completion" and comp.usage.completion_tokens <= 5
    assert out["ids"]["response"]["body"]["usage"]["prompt_tokens"] == 4


def test_greedy_is_deterministic_and_max_tokens_honoured(deployment):
    c = deployment.client()
    rows = chat_lines(2, TINY, max_tokens=7, temperature=0)
    rows[1]["body"]["messages"] = rows[0]["body"]["messages"]
    out = read_lines(c, run_batch(c, rows).output_file_id)
    texts = [o["response"]["body"]["choices"][0]["message"]["content"] for o in out]
    assert texts[0] == texts[1]
    assert all(o["response"]["body"]["usage"]["completion_tokens"] <= 7 for o in out)


def test_batches_list_pagination(deployment):
    c = deployment.client()
    f = c.files.create(file=("p.jsonl", jsonl(chat_lines(1, TINY))), purpose="batch")
    ids = [c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h").id
           for _ in range(5)]
    page = c.batches.list(limit=2)
    assert len(page.data) == 2 and page.has_more
    seen = [b.id for b in c.batches.list(limit=2)]          # the SDK follows `after` cursors
    assert set(ids) <= set(seen) and len(seen) == len(set(seen))
    first = c.batches.list(limit=3)
    second = c.batches.list(limit=3, after=first.data[-1].id)
    assert not {b.id for b in first.data} & {b.id for b in second.data}
    raw = c.get("/batches", cast_to=object, options={"params": {"limit": 2}})
    assert raw["first_id"] == raw["data"][0]["id"] and raw["last_id"] == raw["data"][-1]["id"]
    with pytest.raises(openai.BadRequestError):
        c.batches.list(limit=101)


def test_files_api(deployment):
    c = deployment.client()
    data = jsonl(chat_lines(2, TINY))
    f = c.files.create(file=("mine.jsonl", data), purpose="batch")
    assert f.bytes == len(data) and f.filename == "mine.jsonl" and f.purpose == "batch" and f.object == "file"
    assert c.files.retrieve(f.id).id == f.id
    assert c.files.content(f.id).content == data
    assert f.id in {x.id for x in c.files.list()}
    assert c.files.delete(f.id).deleted
    with pytest.raises(openai.NotFoundError) as e:
        c.files.retrieve(f.id)
    assert e.value.body["code"] == "not_found"
    with pytest.raises(openai.BadRequestError):
        c.files.create(file=("x.jsonl", data), purpose="fine-tune")


def test_models_and_errors(deployment):
    c = deployment.client()
    assert [m.id for m in c.models.list()] == [TINY]
    # `created`: when the checkpoint was made (a real time, the same on every call), not 0.
    [m] = c.models.list().data
    assert 1_600_000_000 < m.created <= time.time() and c.models.retrieve(TINY).created == m.created
    with pytest.raises(openai.NotFoundError):
        c.batches.retrieve("batch_nope")
    f = c.files.create(file=("m.jsonl", jsonl(chat_lines(1, TINY))), purpose="batch")
    for kwargs, param in (({"endpoint": "/v1/moderations"}, "endpoint"),
                          ({"completion_window": "1h"}, "completion_window"),
                          ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
                          ({"metadata": {"k": "v" * 513}}, "metadata")):
        args = {"input_file_id": f.id, "endpoint": "/v1/chat/completions", "completion_window": "24h", **kwargs}
        with pytest.raises(openai.BadRequestError) as e:
            c.batches.create(**args)
        assert e.value.status_code == 400 and e.value.body["param"] == param
        assert set(e.value.response.json()["error"]) == {"message", "type", "param", "code"}
