"""n > 1: the choices of one prompt share its KV blocks (one prefill), each draws from its own stream (a seed
gives n reproducible choices), usage sums the completions; in a batch and interactively (plain and streamed)."""
from __future__ import annotations

import pytest
from sqlalchemy import select

from blendserve.core.db import make_engine, make_sessionmaker
from blendserve.core.models import Batch, Request
from blendserve.migrations.upgrade import upgrade
from blendserve.scheduler.planning import _output_bound
from blendserve.worker.engines.base import GenRequest, SamplingParams
from tests.conftest import TINY
from tests.live import pg_schema_url, read_lines, run_batch

ASK = [{"role": "user", "content": "Write something."}]


@pytest.fixture(scope="module")
def no_specials(tiny_engine) -> dict:
    return {str(i): -100 for i in tiny_engine.tokenizer.all_special_ids}


def _prompt_tokens_computed(steps) -> int:
    return sum(max(0, min(c.start + c.n, c.seq.prompt_len) - c.start) for s in steps for c in s.chunks)


def test_n_choices_prefill_the_prompt_once_and_a_seed_repeats_them(tiny_engine) -> None:
    prompt = tiny_engine.tokenizer.encode("the quick brown fox jumps over the lazy dog " * 40)
    params = SamplingParams(max_tokens=6, temperature=1.0, seed=11, n=8)
    runs = []
    for _ in range(2):
        tiny_engine.close()                      # an empty prefix cache: nothing served from an earlier run
        tiny_engine.step_log = []
        (result,) = list(tiny_engine.generate([GenRequest(1, prompt, params)]))
        runs.append([c.output_ids for c in [result, *result.choices]])
        computed = _prompt_tokens_computed(tiny_engine.step_log)
        # One prefill; each other choice computes at most its last partial block (16 tokens) again.
        assert len(prompt) <= computed <= len(prompt) + 7 * tiny_engine.block_size, (computed, len(prompt))
        assert result.completion_tokens == sum(len(c.output_ids) for c in [result, *result.choices])
    tiny_engine.step_log = None
    assert runs[0] == runs[1] and len(runs[0]) == 8
    assert len({tuple(o) for o in runs[0]}) > 1                  # each choice its own stream


def test_n_in_a_batch(served, no_specials) -> None:
    c = served.client()
    rows = [{"custom_id": f"n{i}", "method": "POST", "url": "/v1/chat/completions",
             "body": {"model": TINY, "messages": ASK, "max_tokens": 6, "n": 3, "seed": i, "temperature": 1.0,
                      "logit_bias": no_specials}} for i in range(2)]
    b = run_batch(c, rows)
    assert b.status == "completed", b
    for line in read_lines(c, b.output_file_id):
        body = line["response"]["body"]
        assert [ch["index"] for ch in body["choices"]] == [0, 1, 2]
        assert body["usage"]["completion_tokens"] == 18                  # 3 choices of 6 tokens
        assert all(ch["finish_reason"] == "length" for ch in body["choices"])


def test_n_interactive_plain_and_streamed_with_a_seed(served, no_specials) -> None:
    c = served.client()
    kw = dict(model=TINY, messages=ASK, max_tokens=5, n=2, seed=5, temperature=1.0, logit_bias=no_specials)
    a, b = c.chat.completions.create(**kw), c.chat.completions.create(**kw)
    assert [x.message.content for x in a.choices] == [x.message.content for x in b.choices]
    assert a.usage.completion_tokens == 10 and len(a.choices) == 2
    texts = {0: "", 1: ""}
    finishes = {}
    for chunk in c.chat.completions.create(**kw, stream=True):
        for ch in chunk.choices:
            texts[ch.index] += ch.delta.content or ""
            if ch.finish_reason:
                finishes[ch.index] = ch.finish_reason
    assert [texts[0], texts[1]] == [x.message.content for x in a.choices]
    assert finishes == {0: "length", 1: "length"}
    done = c.completions.create(model=TINY, prompt="Once", max_tokens=3, n=3, seed=1, logit_bias=no_specials)
    assert [x.index for x in done.choices] == [0, 1, 2] and done.usage.completion_tokens == 9


def test_the_planner_counts_n_outputs(tmp_path, backend) -> None:
    """The planner's output bound of a request is max_tokens for each of its choices, read from the stored body
    on SQLite and PostgreSQL alike (JSON null and a missing n are one choice)."""
    url = f"sqlite:///{tmp_path}/db.sqlite" if backend == "sqlite" else pg_schema_url()
    upgrade(url)
    sessions = make_sessionmaker(make_engine(url))
    with sessions.begin() as s:
        s.add(Batch(id="batch_n", owner="o", endpoint="/v1/chat/completions", input_file_id="f",
                    completion_window="24h", status="in_progress", created_at=0, expires_at=10))
        for i, body in enumerate([{"n": 3}, {}, {"n": None}, {"n": 1}]):
            s.add(Request(batch_id="batch_n", line=i + 1, custom_id=f"r{i}", model=TINY, body=body, max_tokens=10))
    with sessions.begin() as s:
        got = s.execute(select(_output_bound()).order_by(Request.line)).scalars().all()
    assert got == [30, 10, 10, 10]
