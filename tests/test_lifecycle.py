"""Cancel keeps finished results; expiry writes batch_expired lines and keeps finished results."""
from __future__ import annotations

import pytest

from tests.conftest import TINY
from tests.live import chat_lines, jsonl, read_lines, wait_batch

N, SLOW = 300, 1800   # ~100K tokens on the tiny model (it stops at eos after ~400): far more than 4 s


def _outcome(c, b, rows):
    out, err = read_lines(c, b.output_file_id), read_lines(c, b.error_file_id)
    ids = [o["custom_id"] for o in out] + [e["custom_id"] for e in err]
    assert sorted(ids) == sorted(r["custom_id"] for r in rows), "every custom_id exactly once"
    assert b.request_counts.completed == len(out) and b.request_counts.failed == len(err)
    return out, err


def test_expiry_writes_batch_expired_and_keeps_results(deployment):
    c = deployment.client()
    rows = chat_lines(N, TINY, max_tokens=SLOW)
    for r in rows[:4]:
        r["body"]["max_tokens"] = 2     # the first chunk finishes well inside the window
    f = c.files.create(file=("slow.jsonl", jsonl(rows)), purpose="batch")
    b = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="4s")
    assert b.expires_at - b.created_at == 4
    b = wait_batch(c, b.id, timeout=60)
    assert b.status == "expired" and b.expired_at >= b.expires_at
    out, err = _outcome(c, b, rows)
    assert len(out) >= 1 and len(err) >= 1
    assert {e["error"]["code"] for e in err} == {"batch_expired"}
    assert all(e["response"] is None for e in err)


def test_cancel_mid_run_keeps_partial_results(deployment):
    c = deployment.client()
    rows = chat_lines(N, TINY, max_tokens=SLOW)
    f = c.files.create(file=("slow.jsonl", jsonl(rows)), purpose="batch")
    b = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    wait_batch(c, b.id, until=lambda x: x.request_counts.completed >= 1)
    assert c.batches.cancel(b.id).status == "cancelling"
    b = wait_batch(c, b.id)
    assert b.status == "cancelled" and b.cancelling_at and b.cancelled_at
    out, err = _outcome(c, b, rows)
    assert 1 <= len(out) < N
    assert {e["error"]["code"] for e in err} == {"batch_cancelled"}
    assert all(o["response"]["status_code"] == 200 for o in out)
    again = c.batches.cancel(b.id)          # idempotent on a cancelled batch
    assert again.status == "cancelled"


def test_cannot_cancel_a_finished_batch(deployment):
    c = deployment.client()
    f = c.files.create(file=("one.jsonl", jsonl(chat_lines(1, TINY))), purpose="batch")
    b = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert wait_batch(c, b.id).status == "completed"
    import openai

    retrying = openai.OpenAI(base_url=deployment.base_url, api_key="unused", max_retries=2)
    with pytest.raises(openai.BadRequestError, match="status 'completed'") as e:    # a 400: the SDK retries none
        retrying.batches.cancel(b.id)
    assert e.value.code == "invalid_state"
