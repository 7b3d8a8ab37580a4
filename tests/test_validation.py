"""Validation without tokenizing: the byte bound, the exact path for long prompts, and deferred tokenization."""
from __future__ import annotations

import dataclasses
import json
import time

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from sqlalchemy import select

from blendserve.core.config import Settings
from blendserve.core.db import make_engine, make_sessionmaker
from blendserve.core.models import Batch, File, Request
from blendserve.core.storage import FileStore
from blendserve.migrations.upgrade import upgrade
from blendserve.protocol.bodies import model_info
from blendserve.scheduler import intake
from blendserve.scheduler.validation import LineError, ValidRequest, tokenize, validate

CHAT = "/v1/chat/completions"
TEXTS = ["plain words here", "日本語のテキストと中文", "emoji 🤖🎉👩‍👩‍👧", "e\u0301\u0301 combining",
         "   \t\n\n  spaces",
         "<|im_start|>user\nfake<|im_end|>", "\u2028\u0085\x00 odd", "x" * 900]


@pytest.fixture(scope="module", params=["tiny", "smollm2"])
def info(request, tiny_model):
    return model_info("m", tiny_model if request.param == "tiny" else request.getfixturevalue("smollm2_checkpoint"))


def line(i: int, messages: list[dict], **body) -> bytes:
    return json.dumps({"custom_id": f"r{i}", "method": "POST", "url": CHAT,
                       "body": {"model": "m", "messages": messages, **body}}).encode()


def run(info, lines: list[bytes]) -> list[ValidRequest | LineError]:
    return list(validate(lines, CHAT, {"m": info}, 1000))


def check_bounds(info, contents: list[str]) -> None:
    msgs = [[{"role": "system", "content": c}, {"role": "user", "content": c[::-1]}] for c in contents]
    out = run(info, [line(i, m, max_tokens=1) for i, m in enumerate(msgs)])
    exact = tokenize(CHAT, [{"messages": m} for m in msgs], info)
    for r, ids in zip(out, exact):
        assert isinstance(r, ValidRequest)
        assert len(ids) <= r.bound, (r.bound, len(ids))
        assert r.prompt_ids is None or r.prompt_ids == ids


def test_bound_covers_the_real_token_count(info):
    check_bounds(info, TEXTS)


@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.text(max_size=200), min_size=1, max_size=4))
def test_bound_holds_for_any_text(info, contents):
    check_bounds(info, contents)


def test_only_prompts_near_the_context_are_tokenized_during_validation(info):
    ctx = info.context_length
    short = [{"role": "user", "content": "hello"}]
    near = [{"role": "user", "content": "the " * (ctx // 4)}]         # bytes ~ ctx, tokens far fewer
    over = [{"role": "user", "content": "日本語 " * ctx}]                # more tokens than the context
    out = run(info, [line(1, short), line(2, near, max_tokens=5), line(3, over), line(4, short, max_tokens=ctx)])
    assert out[0].prompt_ids is None and out[0].max_tokens is None      # deferred
    assert out[1].prompt_ids == tokenize(CHAT, [{"messages": near}], info)[0] and out[1].max_tokens == 5
    assert [(e.line, e.code) for e in out[2:]] == [(3, "context_length_exceeded"), (4, "context_length_exceeded")]


def test_json_edge_cases(info):
    big_seed = b'{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "m", ' \
               b'"seed": 100000000000000000000000, "messages": [{"role": "user", "content": "hi"}]}}'
    surrogate = line(2, [{"role": "user", "content": "x"}]).replace(b'"x"', b'"\\ud800"')
    out = run(info, [big_seed, surrogate, b'{"custom_id": '])
    assert [(e.line, e.code, e.param) for e in out] == [(1, "invalid_value", "seed"), (2, "invalid_value", None),
                                                       (3, "invalid_json_line", None)]
    assert "surrogate" in out[1].message and "JSON" in out[2].message


def make_batch(tmp_path, info, bodies: list[dict], statuses: list[str]):
    """A running batch whose input file holds `bodies`, with request rows as validation leaves them."""
    settings = Settings(data_dir=tmp_path)
    upgrade(settings.db_url)
    sessions = make_sessionmaker(make_engine(settings.db_url))
    store = FileStore(settings.files_dir)
    lines = [json.dumps({"custom_id": f"r{i}", "method": "POST", "url": CHAT, "body": b}).encode() + b"\n"
             for i, b in enumerate(bodies, start=1)]
    with store.open_writer("file-in") as w:
        w.write(b"".join(lines))
        w.commit()
    now, offset = int(time.time()), 0
    with sessions.begin() as s:
        s.add(File(id="file-in", owner="", filename="in.jsonl", purpose="batch", bytes=0, created_at=now))
        s.add(Batch(id="batch_x", owner="", endpoint=CHAT, model="m", input_file_id="file-in",
                    completion_window="24h", status="in_progress", created_at=now, in_progress_at=now,
                    expires_at=now + 3600, total=len(bodies)))
        for i, (body, raw, status) in enumerate(zip(bodies, lines, statuses), start=1):
            s.add(Request(batch_id="batch_x", line=i, custom_id=f"r{i}", model="m", body={}, status=status,
                          max_tokens=body.get("max_tokens"), input_offset=offset, input_length=len(raw) - 1,
                          completion_tokens=0, cached_tokens=0))
            offset += len(raw)
    return sessions, store


def rows_of(sessions) -> list[Request]:
    with sessions() as s:
        return s.scalars(select(Request).order_by(Request.line)).all()


def test_scheduler_tokenizes_queued_rows(tmp_path, info):
    """Queued rows become pending with the validation's own token ids, read back from the input file; one
    whose real count breaks the context (a tokenizer that broke the bound) fails alone; rows no longer
    queued are left as they are."""
    long_text = "word " * (info.context_length - 10)
    bodies = [{"model": "m", "messages": [{"role": "user", "content": t}], **extra} for t, extra in
              (("hi", {}), ("there ☃", {"max_tokens": 7}), (long_text, {"max_tokens": 100}), ("gone", {}))]
    sessions, store = make_batch(tmp_path, info, bodies, ["queued"] * 3 + ["cancelled"])
    assert intake.tokenize_queued(sessions, store, {"m": info}) == 3
    rows = rows_of(sessions)
    exact = tokenize(CHAT, bodies[:2], info)
    assert [r.status for r in rows] == ["pending", "pending", "failed", "cancelled"]
    assert [intake.pack_ids(ids) for ids in exact] == [rows[0].prompt_ids, rows[1].prompt_ids]
    assert rows[0].prompt_tokens == len(exact[0]) and rows[0].max_tokens == info.context_length - len(exact[0])
    assert rows[1].max_tokens == 7
    assert rows[2].error["code"] == "context_length_exceeded" and rows[2].prompt_ids is None
    assert rows[3].prompt_ids is None
    assert intake.tokenize_queued(sessions, store, {"m": info}) == 0


def test_deleted_input_file_fails_the_queued_rows(tmp_path, info):
    sessions, store = make_batch(tmp_path, info, [{"model": "m", "messages": [{"role": "user", "content": "x"}]}],
                                 ["queued"])
    store.delete("file-in")
    assert intake.tokenize_queued(sessions, store, {"m": info}) == 1
    [row] = rows_of(sessions)
    assert row.status == "failed" and row.error["code"] == "file_not_found"


def test_a_failing_tokenizer_fails_only_its_requests(tmp_path, info):
    """Fault injection: an encode that raises on one prompt fails that request alone, and a model no longer
    served fails the rest; the scheduler carries on either way."""
    def encode(texts):
        if any("BOOM" in t for t in texts):
            raise ValueError("bad prompt")
        return info.encode(texts)

    broken = dataclasses.replace(info, encode=encode)
    bodies = [{"model": "m", "messages": [{"role": "user", "content": t}]} for t in ("fine", "BOOM", "ok")]
    sessions, store = make_batch(tmp_path, info, bodies, ["queued"] * 3)
    assert intake.tokenize_queued(sessions, store, {"m": broken}) == 3
    rows = rows_of(sessions)
    assert [r.status for r in rows] == ["pending", "failed", "pending"]
    assert rows[1].error["code"] == "tokenization_failed" and "bad prompt" in rows[1].error["message"]


def test_a_model_no_longer_served_fails_its_queued_rows(tmp_path, info):
    sessions, store = make_batch(tmp_path, info, [{"model": "m", "messages": [{"role": "user", "content": "x"}]}],
                                 ["queued"])
    assert intake.tokenize_queued(sessions, store, {}) == 1
    [row] = rows_of(sessions)
    assert row.status == "failed" and row.error["code"] == "model_not_found"


def test_a_chat_template_refusing_the_roles_is_a_line_error(info):
    def render(messages):
        if [m["role"] for m in messages][-1] != "user":
            raise ValueError("Conversation roles must alternate user/assistant")
        return info.render_chat(messages)

    strict = dataclasses.replace(info, render_chat=render)
    out = list(validate([line(1, [{"role": "user", "content": "hi"}]),
                         line(2, [{"role": "assistant", "content": "hi"}])], CHAT, {"m": strict}, 10))
    [ok] = [r for r in out if isinstance(r, ValidRequest)]
    [err] = [r for r in out if isinstance(r, LineError)]
    assert ok.line == 1 and (err.line, err.code, err.param) == (2, "invalid_value", "messages")
    assert "alternate" in err.message


def test_a_batch_cancelled_while_validating_keeps_no_rows(tmp_path, info):
    """The insert loop notices the cancel after a group of rows, stops, and leaves nothing behind."""
    settings = Settings(data_dir=tmp_path)
    upgrade(settings.db_url)
    sessions = make_sessionmaker(make_engine(settings.db_url))
    store = FileStore(settings.files_dir)
    with store.open_writer("file-in") as w:
        w.write(b"".join(line(i, [{"role": "user", "content": f"q{i}"}]) + b"\n"
                         for i in range(intake.INSERT_GROUP * 2 + 5)))
        w.commit()
    now = int(time.time())
    with sessions.begin() as s:
        s.add(File(id="file-in", owner="", filename="in.jsonl", purpose="batch", bytes=0, created_at=now))
        s.add(Batch(id="batch_x", owner="", endpoint=CHAT, input_file_id="file-in", completion_window="24h",
                    status="cancelling", created_at=now, expires_at=now + 3600, total=0))
    intake.validate_batch("batch_x", sessions, store, settings, lambda: {"m": info})
    assert rows_of(sessions) == []
    with sessions() as s:
        assert s.get(Batch, "batch_x").status == "cancelling"     # lifecycle finishes the cancel


def test_token_ids_past_the_vocabulary_fail_alone(info):
    """A prompt of token ids holding one past the vocabulary is that line's error (an engine's embedding lookup
    would fail the whole step); ids within it pass."""
    vocab = info.vocab_size
    assert vocab and vocab > 100
    rows = [{"custom_id": f"c{i}", "method": "POST", "url": "/v1/completions",
             "body": {"model": "m", "prompt": p, "max_tokens": 2}} for i, p in enumerate([[1, 2], [1, vocab], [2**40]])]
    out = list(validate([json.dumps(r).encode() for r in rows], "/v1/completions", {"m": info}, 10))
    ok = [r for r in out if isinstance(r, ValidRequest)]
    bad = sorted((e.line, e.param, e.fails_file) for e in out if isinstance(e, LineError))
    assert [r.custom_id for r in ok] == ["c0"] and bad == [(2, "prompt", False), (3, "prompt", False)]
