"""A malformed file ends `failed` with OpenAI-style errors carrying codes and line numbers; a well-formed line
that cannot run is its own error-file line (the endpoint's 4xx answer) while the rest of the batch runs."""
from __future__ import annotations

import json

import openai
import pytest

from tests.conftest import MAX_LINES, TINY
from tests.live import chat_lines, jsonl, read_lines, run_batch, wait_batch


def good(i: int = 0, **body) -> dict:
    row = chat_lines(i + 1, TINY)[i]
    row["body"].update(body)
    return row


def with_line(bad, at: int = 2, n: int = 3, **body) -> bytes:
    """n good lines (their bodies updated with `body`) with `bad` (a dict, or raw bytes) as line `at` (1-based)."""
    lines = [json.dumps(good(i, **body)).encode() for i in range(n)]
    lines[at - 1] = bad if isinstance(bad, bytes) else json.dumps(bad).encode()
    return b"\n".join(lines) + b"\n"


def drop(key: str) -> dict:
    row = good(1)
    del row[key]
    return row


# What OpenAI fails a file for: its format, the envelope of a line, a size limit.
FILE_CASES = {
    "utf8": (with_line(b'{"custom_id": "\xff\xfe"}'), "invalid_utf8", 2),
    "not_json": (with_line(b"{not json"), "invalid_json_line", 2),
    "not_object": (with_line(b"[1, 2]", at=1), "invalid_json_line", 1),
    "no_custom_id": (with_line(drop("custom_id"), at=3), "missing_required_parameter", 3),
    "no_body": (with_line(drop("body")), "missing_required_parameter", 2),
    "method": (with_line({**good(1), "method": "GET"}), "invalid_method", 2),
    "url": (with_line({**good(1), "url": "/v1/completions"}), "mismatched_endpoint", 2),
    "duplicate": (with_line(good(0), at=3), "duplicate_custom_id", 3),
    "body_type": (with_line({**good(1), "body": "text"}), "invalid_value", 2),
    "too_many": (jsonl(chat_lines(MAX_LINES + 1, TINY)), "too_many_requests", MAX_LINES + 1),
    "empty": (b"\n\n", "empty_file", 1),
}

# A request's own failure (its parameters, its length, its model): that line's error, status code and param.
REQUEST_CASES = {
    "model": (good(1, model="gpt-4o"), "model_not_found", 404, "body.model"),
    "stream": (good(1, stream=True), "stream_unsupported", 400, "stream"),
    "max_tokens": (good(1, max_tokens=0), "invalid_value", 400, "max_tokens"),
    "max_tokens_huge": (good(1, max_tokens=10_000_000), "context_length_exceeded", 400, "body"),
    "temperature": (good(1, temperature=3), "invalid_value", 400, "temperature"),
    "top_p": (good(1, top_p="high"), "invalid_value", 400, "top_p"),
    "messages_empty": (good(1, messages=[]), "invalid_value", 400, "messages"),
    "role": (good(1, messages=[{"role": "wizard", "content": "hi"}]), "invalid_value", 400, None),
    "stop": (good(1, stop=["a", "b", "c", "d", "e"]), "invalid_value", 400, "stop"),
    "n": (good(1, n=200), "invalid_value", 400, "n"),
    "context": (good(1, messages=[{"role": "user", "content": "word " * 5000}]), "context_length_exceeded", 400,
                "body"),
}


def test_malformed_files_fail_with_line_numbers(deployment):
    c = deployment.client()
    batches = {}
    for name, (data, _, _) in FILE_CASES.items():
        f = c.files.create(file=(f"{name}.jsonl", data), purpose="batch")
        batches[name] = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                                         completion_window="24h").id
    for name, (_, code, line) in FILE_CASES.items():
        b = wait_batch(c, batches[name])
        assert b.status == "failed", (name, b.status)
        assert b.failed_at and b.output_file_id is None and b.request_counts.total == 0
        errs = b.errors.data
        assert [(e.code, e.line) for e in errs] == [(code, line)], (name, errs)
        assert errs[0].message
    # The service serves on: a good batch still completes.
    assert run_batch(c, chat_lines(3, TINY)).status == "completed"


def test_a_bad_request_fails_alone(deployment):
    """Each bad request as line 2 of three: the batch completes, lines 1 and 3 run, line 2 is an error line."""
    c = deployment.client()
    batches = {}
    for name, (bad, _, _, _) in REQUEST_CASES.items():
        f = c.files.create(file=(f"{name}.jsonl", with_line(bad, max_tokens=4)), purpose="batch")
        batches[name] = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                                         completion_window="24h").id
    for name, (bad, code, status, param) in REQUEST_CASES.items():
        b = wait_batch(c, batches[name])
        assert b.status == "completed" and not b.errors, (name, b.status, b.errors)
        assert (b.request_counts.total, b.request_counts.completed, b.request_counts.failed) == (3, 2, 1), name
        out, [err] = read_lines(c, b.output_file_id), read_lines(c, b.error_file_id)
        assert sorted(o["custom_id"] for o in out) == [good(0)["custom_id"], good(2)["custom_id"]], name
        assert err["custom_id"] == bad["custom_id"] and err["error"] is None, (name, err)
        assert err["response"]["status_code"] == status, (name, err)
        e = err["response"]["body"]["error"]
        assert e["code"] == code and e["type"] == "invalid_request_error" and e["message"], (name, e)
        if param is not None:
            assert e["param"] == param, (name, e)


def test_many_bad_requests_in_a_long_file(make_deployment):
    """10,000 lines with 50 bad requests spread through them: every good line runs, each bad one is its own
    error line, each custom_id once."""
    # Chunks of 64 (the deployment's test default is 4): the subject is the file's bad lines, not 2,500 claims.
    d = make_deployment(BLENDSERVE_MAX_REQUESTS_PER_FILE="20000", BLENDSERVE_MAX_FILE_BYTES=str(10**8),
                        BLENDSERVE_CHUNK_REQUESTS="64")
    c = d.start_all().client()
    n, bad_every = 10_000, 200
    rows = chat_lines(n, TINY, max_tokens=1)
    kinds = [{"max_tokens": 10_000_000}, {"temperature": -1}, {"model": "nope"},
             {"messages": [{"role": "user", "content": "word " * 5000}]}, {"response_format": {"type": "bogus"}}]
    bad = set()
    for j, i in enumerate(range(7, n, bad_every)):
        rows[i]["body"].update(kinds[j % len(kinds)])
        bad.add(rows[i]["custom_id"])
    b = run_batch(c, rows)
    assert b.status == "completed", b
    out, err = read_lines(c, b.output_file_id), read_lines(c, b.error_file_id)
    assert len(out) == n - len(bad) and len(err) == len(bad)
    assert {e["custom_id"] for e in err} == bad
    assert sorted(x["custom_id"] for x in out + err) == sorted(r["custom_id"] for r in rows)
    assert all(e["response"]["status_code"] in (400, 404) and e["error"] is None for e in err)
    assert (b.request_counts.completed, b.request_counts.failed) == (n - len(bad), len(bad))


def test_oversized_upload_is_413(deployment):
    c = deployment.client()
    with pytest.raises(openai.APIStatusError) as e:
        c.files.create(file=("big.jsonl", b"x" * 300_000), purpose="batch")
    assert e.value.status_code == 413 and e.value.body["code"] == "file_too_large"
    assert all(f.filename != "big.jsonl" for f in c.files.list())
