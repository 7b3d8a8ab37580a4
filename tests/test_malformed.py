"""Malformed input files end `failed` with OpenAI-style errors carrying codes and line numbers."""
from __future__ import annotations

import json

import openai
import pytest

from tests.conftest import MAX_LINES, TINY
from tests.live import chat_lines, jsonl, run_batch, wait_batch


def good(i: int = 0, **body) -> dict:
    row = chat_lines(i + 1, TINY)[i]
    row["body"].update(body)
    return row


def with_line(bad, at: int = 2, n: int = 3) -> bytes:
    """n good lines with `bad` (a dict, or raw bytes) as line `at` (1-based)."""
    lines = [json.dumps(good(i)).encode() for i in range(n)]
    lines[at - 1] = bad if isinstance(bad, bytes) else json.dumps(bad).encode()
    return b"\n".join(lines) + b"\n"


def drop(key: str) -> dict:
    row = good(1)
    del row[key]
    return row


CASES = {
    "utf8": (with_line(b'{"custom_id": "\xff\xfe"}'), "invalid_utf8", 2),
    "not_json": (with_line(b"{not json"), "invalid_json_line", 2),
    "not_object": (with_line(b"[1, 2]", at=1), "invalid_json_line", 1),
    "no_custom_id": (with_line(drop("custom_id"), at=3), "missing_required_parameter", 3),
    "no_body": (with_line(drop("body")), "missing_required_parameter", 2),
    "method": (with_line({**good(1), "method": "GET"}), "invalid_method", 2),
    "url": (with_line({**good(1), "url": "/v1/completions"}), "mismatched_endpoint", 2),
    "duplicate": (with_line(good(0), at=3), "duplicate_custom_id", 3),
    "model": (with_line(good(1, model="gpt-4o")), "model_not_found", 2),
    "stream": (with_line(good(1, stream=True)), "stream_unsupported", 2),
    "max_tokens": (with_line(good(1, max_tokens=0)), "invalid_value", 2),
    "temperature": (with_line(good(1, temperature=3)), "invalid_value", 2),
    "top_p": (with_line(good(1, top_p="high")), "invalid_value", 2),
    "messages_empty": (with_line(good(1, messages=[])), "invalid_value", 2),
    "role": (with_line(good(1, messages=[{"role": "wizard", "content": "hi"}])), "invalid_value", 2),
    "stop": (with_line(good(1, stop=["a", "b", "c", "d", "e"])), "invalid_value", 2),
    "n": (with_line(good(1, n=200)), "invalid_value", 2),
    "body_type": (with_line({**good(1), "body": "text"}), "invalid_value", 2),
    "context": (with_line(good(1, messages=[{"role": "user", "content": "word " * 5000}])),
                "context_length_exceeded", 2),
    "too_many": (jsonl(chat_lines(MAX_LINES + 1, TINY)), "too_many_requests", MAX_LINES + 1),
    "empty": (b"\n\n", "empty_file", 1),
}


def test_malformed_files_fail_with_line_numbers(deployment):
    c = deployment.client()
    batches = {}
    for name, (data, _, _) in CASES.items():
        f = c.files.create(file=(f"{name}.jsonl", data), purpose="batch")
        batches[name] = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                                         completion_window="24h").id
    for name, (_, code, line) in CASES.items():
        b = wait_batch(c, batches[name])
        assert b.status == "failed", (name, b.status)
        assert b.failed_at and b.output_file_id is None and b.request_counts.total == 0
        errs = b.errors.data
        assert [(e.code, e.line) for e in errs] == [(code, line)], (name, errs)
        assert errs[0].message
    # The service serves on: a good batch still completes.
    assert run_batch(c, chat_lines(3, TINY)).status == "completed"


def test_oversized_upload_is_413(deployment):
    c = deployment.client()
    with pytest.raises(openai.APIStatusError) as e:
        c.files.create(file=("big.jsonl", b"x" * 300_000), purpose="batch")
    assert e.value.status_code == 413 and e.value.body["code"] == "file_too_large"
    assert all(f.filename != "big.jsonl" for f in c.files.list())
