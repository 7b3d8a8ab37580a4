"""Bad but valid-looking lines: request bodies drawn from the OpenAI schema (nulls, unicode, empty
strings, extreme numbers, empty stop lists) in a batch beside a healthy batch. Every line gets a result
or its own clean error line (or the file fails validation with per-line errors), never a server error,
and the healthy batch is untouched."""
from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import TINY
from tests.live import chat_lines, jsonl, read_lines, wait_batch

NULL = st.none()
TEXT = st.text(st.characters(codec="utf-8"), max_size=40)
EXTREME = st.sampled_from([0.0, -0.0, 1e-308, 2.0, 1.0, 1e308, -1e308, 1e-7])
ROLES = st.sampled_from(["system", "developer", "user", "assistant"])
CONTENT = st.one_of(TEXT, st.lists(st.builds(lambda t: {"type": "text", "text": t}, TEXT), max_size=2))

BODY = st.fixed_dictionaries(
    {"messages": st.lists(st.fixed_dictionaries({"role": ROLES, "content": CONTENT}), min_size=1, max_size=3)},
    optional={
        "max_tokens": st.one_of(NULL, st.integers(1, 12), st.sampled_from([0, -1, 2**31 - 1, 2**63])),
        "temperature": st.one_of(NULL, st.floats(0, 2), EXTREME),
        "top_p": st.one_of(NULL, st.floats(0, 1), EXTREME),
        "presence_penalty": st.one_of(NULL, st.floats(-2, 2), EXTREME),
        "frequency_penalty": st.one_of(NULL, st.floats(-2, 2), EXTREME),
        "stop": st.one_of(NULL, st.just([]), TEXT, st.lists(TEXT, max_size=5)),
        "seed": st.one_of(NULL, st.integers(-2**63, 2**63 - 1)),
        "logit_bias": st.one_of(NULL, st.dictionaries(st.integers(0, 511).map(str), st.floats(-100, 100),
                                                      max_size=3)),
        "n": st.one_of(NULL, st.just(1)),
        "user": st.one_of(NULL, TEXT),
        "response_format": st.one_of(NULL, st.just({"type": "text"})),
    })


def _line(i: int, body: dict) -> dict:
    body = dict(body)
    if body.get("max_tokens") is None:
        body["max_tokens"] = 8           # null means "the rest of the context": far too slow for a test
    return {"custom_id": f"fz-{i}", "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": TINY, **body}}


def test_generated_bodies_get_clean_answers_beside_a_healthy_batch(deployment):
    c = deployment.client()
    healthy_rows = chat_lines(6, TINY, max_tokens=6, prefix="healthy ")
    f = c.files.create(file=("healthy.jsonl", jsonl(healthy_rows)), purpose="batch")
    healthy = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")

    @settings(max_examples=4, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.lists(BODY, min_size=1, max_size=5))
    def check(bodies):
        rows = [_line(i, b) for i, b in enumerate(bodies)]
        data = "".join(json.dumps(r, allow_nan=False) + "\n" for r in rows).encode()
        g = c.files.create(file=("fuzz.jsonl", data), purpose="batch")
        b = wait_batch(c, c.batches.create(input_file_id=g.id, endpoint="/v1/chat/completions",
                                           completion_window="24h").id, timeout=120)
        if b.status == "failed":                 # the file was refused: each error names its line
            assert b.errors and b.errors.data, b
            for e in b.errors.data:
                assert e.code != "server_error" and 1 <= e.line <= len(rows), e
            return
        assert b.status == "completed", b
        out, err = read_lines(c, b.output_file_id), read_lines(c, b.error_file_id)
        assert sorted(x["custom_id"] for x in out + err) == sorted(r["custom_id"] for r in rows)
        for e in err:
            assert (e["error"] or e["response"]["body"]["error"])["code"] not in ("server_error", "batch_expired"), e
        for o in out:
            assert o["response"]["status_code"] == 200
            assert isinstance(o["response"]["body"]["choices"][0]["message"]["content"], str)

    check()
    h = wait_batch(c, healthy.id, timeout=120)
    assert h.status == "completed" and h.error_file_id is None, h
    assert sorted(o["custom_id"] for o in read_lines(c, h.output_file_id)) == \
        sorted(r["custom_id"] for r in healthy_rows)
