"""Crashes lose nothing and duplicate nothing: a killed worker, a killed whole service."""
from __future__ import annotations

from tests.conftest import TINY
from tests.live import ROLES, chat_lines, jsonl, read_lines, wait_batch

N, SLOW = 24, 1500


def _submit(c):
    rows = chat_lines(N, TINY, max_tokens=SLOW)
    f = c.files.create(file=("work.jsonl", jsonl(rows)), purpose="batch")
    b = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    return rows, b


def _exactly_once(c, b, rows):
    assert b.status == "completed", b
    out = read_lines(c, b.output_file_id)
    assert sorted(o["custom_id"] for o in out) == sorted(r["custom_id"] for r in rows)
    assert b.request_counts.completed == N and b.error_file_id is None


def test_sigkill_worker_mid_batch(make_deployment):
    d = make_deployment().start_all()
    c = d.client()
    rows, b = _submit(c)
    mid = wait_batch(c, b.id, until=lambda x: x.request_counts.completed >= 1)
    assert mid.request_counts.completed < N
    d.kill("worker")
    d.start("worker", "worker2")
    d.wait_ready()
    _exactly_once(c, wait_batch(c, b.id), rows)


def test_restart_whole_service_mid_batch(make_deployment):
    d = make_deployment().start_all()
    c = d.client()
    rows, b = _submit(c)
    wait_batch(c, b.id, until=lambda x: x.request_counts.completed >= 1)
    for role in ROLES:
        d.kill(role)
    d.start_all()
    _exactly_once(c, wait_batch(c, b.id), rows)
