"""Key rotation on a live deployment while a batch runs: the API restarts with the key moved under a tenant
beside a new one, then with the new key alone; the batch completes, and its results are the new key's."""
from __future__ import annotations

import openai
import pytest

from tests.conftest import TINY
from tests.live import chat_lines, jsonl, read_lines, wait_batch


def restart_api(d, keys: str) -> None:
    d.kill("api")
    d.env["BLENDSERVE_API_KEYS"] = keys
    d.start("api")
    d.wait_ready()


def test_rotation_while_a_batch_runs(make_deployment):
    d = make_deployment(BLENDSERVE_API_KEYS="sk-first-3a1", BLENDSERVE_CPU_MAX_BATCH="4").start_all()
    first = d.client("sk-first-3a1")
    rows = chat_lines(40, TINY, max_tokens=48)
    f = first.files.create(file=("in.jsonl", jsonl(rows)), purpose="batch")
    b = first.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    running = wait_batch(first, b.id, until=lambda x: x.request_counts and x.request_counts.completed >= 1)
    assert running.status == "in_progress"
    restart_api(d, "acme:sk-first-3a1,acme:sk-second-9c0")       # add the new key; the old one joins its tenant
    second = d.client("sk-second-9c0")
    assert second.batches.retrieve(b.id).status in ("in_progress", "finalizing", "completed")
    restart_api(d, "acme:sk-second-9c0")                          # clients moved: remove the old key
    with pytest.raises(openai.AuthenticationError):
        first.batches.retrieve(b.id)
    done = wait_batch(second, b.id)
    assert done.status == "completed" and done.request_counts.completed == len(rows)
    out = read_lines(second, done.output_file_id)
    assert sorted(o["custom_id"] for o in out) == sorted(r["custom_id"] for r in rows)
    assert second.files.retrieve(f.id).id == f.id
    assert {x.id for x in second.files.list()} >= {f.id, done.output_file_id}
