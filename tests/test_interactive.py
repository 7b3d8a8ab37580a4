"""The interactive lane end to end: the real `openai` SDK against the API, a real worker behind it, on SQLite
(the lane does not go through the database: conftest.backend); synchronous and streamed answers, errors as
OpenAI gives them, and interactive requests answered while a batch runs on the same worker, ahead of it."""
from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

from tests.conftest import SQLITE_ONLY, TINY
from tests.live import chat_lines, jsonl, read_lines, wait_batch

pytestmark = SQLITE_ONLY

KEY = "lane-key"
HELLO = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def lane(make_deployment):
    d = make_deployment(BLENDSERVE_API_KEYS=KEY, BLENDSERVE_CPU_MAX_BATCH="4")
    d.start_all()
    c = d.client(KEY)
    deadline = time.time() + 30
    while True:            # the API learns of the worker from its row, within a second of its first beat
        try:
            c.chat.completions.create(model=TINY, messages=HELLO, max_tokens=1)
            return d
        except openai.APIStatusError as e:
            if e.status_code != 503 or time.time() > deadline:
                raise
            time.sleep(0.2)


def test_chat_sync_and_streamed_give_the_same_greedy_answer(lane) -> None:
    c = lane.client(KEY)
    sync = c.chat.completions.create(model=TINY, messages=HELLO, max_tokens=12, temperature=0)
    assert sync.object == "chat.completion" and sync.model == TINY
    assert sync.choices[0].message.role == "assistant" and sync.choices[0].finish_reason == "length"
    assert sync.usage.completion_tokens == 12 and sync.usage.prompt_tokens > 0
    chunks = list(c.chat.completions.create(model=TINY, messages=HELLO, max_tokens=12, temperature=0,
                                            stream=True, stream_options={"include_usage": True}))
    assert all(ch.object == "chat.completion.chunk" for ch in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == sync.choices[0].message.content
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12


def test_completions_sync_and_streamed(lane) -> None:
    c = lane.client(KEY)
    sync = c.completions.create(model=TINY, prompt="Once upon a time", max_tokens=6, temperature=0)
    assert sync.object == "text_completion" and sync.usage.completion_tokens == 6
    parts = list(c.completions.create(model=TINY, prompt="Once upon a time", max_tokens=6, temperature=0,
                                      stream=True))
    assert "".join(p.choices[0].text for p in parts) == sync.choices[0].text
    assert parts[-1].choices[0].finish_reason == "length"


def test_errors_are_openai_shaped(lane, tiny_model) -> None:
    c = lane.client(KEY)
    with pytest.raises(openai.BadRequestError) as e:          # checked by the worker, as a batch line is
        c.chat.completions.create(model=TINY, messages=[], max_tokens=4)
    assert e.value.body["param"] == "messages"
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model=TINY, messages=HELLO, max_tokens=4, stream_options={"include_usage": True})
    assert e.value.body["param"] == "stream_options"
    with pytest.raises(openai.BadRequestError):
        c.chat.completions.create(model=TINY, messages=HELLO, tools=[{"type": "function", "function": {"name": "f"}}])
    vocab = json.loads((tiny_model / "config.json").read_text())["vocab_size"]
    with pytest.raises(openai.BadRequestError) as e:          # a token id past the vocabulary: refused at the door
        c.completions.create(model=TINY, prompt=[1, vocab], max_tokens=2)
    assert e.value.body["param"] == "prompt" and "vocabulary" in e.value.body["message"]
    assert c.completions.create(model=TINY, prompt=[1, 2, 3], max_tokens=2).choices[0].text is not None
    with pytest.raises(openai.NotFoundError) as e:
        c.chat.completions.create(model="no-such-model", messages=HELLO)
    assert e.value.body["code"] == "model_not_found"
    with pytest.raises(openai.AuthenticationError):
        lane.client("wrong-key").chat.completions.create(model=TINY, messages=HELLO)
    r = httpx.post(f"{lane.base_url}/chat/completions", content=b"{not json",
                   headers={"authorization": f"Bearer {KEY}"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"


def test_interactive_requests_are_answered_ahead_of_a_running_batch(lane) -> None:
    """400 batch requests, four running at a time on the same worker: chats sent while the batch runs are
    answered within a fraction of the batch's time, while it is still running, and the batch loses nothing."""
    c = lane.client(KEY)
    f = c.files.create(file=("big.jsonl", jsonl(chat_lines(400, TINY, max_tokens=48))), purpose="batch")
    b = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    t0 = time.time()
    started = wait_batch(c, b.id, until=lambda x: x.request_counts.completed >= 8
                         or x.status not in ("in_progress", "validating"))
    assert started.status == "in_progress", started.errors
    latencies = []
    for _ in range(5):
        t = time.time()
        r = c.chat.completions.create(model=TINY, messages=HELLO, max_tokens=4, temperature=0)
        latencies.append(time.time() - t)
        assert r.usage.completion_tokens == 4
    during = c.batches.retrieve(b.id)
    assert during.status == "in_progress" and during.request_counts.completed < 400
    done = wait_batch(c, b.id, timeout=300)
    batch_s = time.time() - t0
    assert done.status == "completed" and done.request_counts.completed == 400
    assert len({line["custom_id"] for line in read_lines(c, done.output_file_id)}) == 400
    assert max(latencies) < batch_s / 10, (latencies, batch_s)


def test_a_stopping_worker_ends_its_interactive_calls_with_an_error_not_a_hang(lane) -> None:
    """SIGTERM while a stream is running: the caller gets an OpenAI error event within seconds, the worker
    exits cleanly, and a new worker serves the next call."""
    import signal

    c = lane.client(KEY)
    stream = c.chat.completions.create(model=TINY, messages=HELLO, max_tokens=1500, temperature=0, stream=True)
    t0 = time.time()
    with pytest.raises(openai.APIError):
        for i, _ in enumerate(stream):
            if i == 3:
                assert lane.signal("worker", signal.SIGTERM) < 10
    assert time.time() - t0 < 15
    lane.start("worker")
    lane.wait_ready()
    deadline = time.time() + 30
    while True:
        try:
            r = c.chat.completions.create(model=TINY, messages=HELLO, max_tokens=2)
            break
        except openai.APIStatusError as e:
            assert e.status_code == 503 and time.time() < deadline
            time.sleep(0.2)
    assert r.usage.completion_tokens == 2
