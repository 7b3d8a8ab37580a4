"""A clean stop (SIGTERM/SIGINT) returns within 10 s, hands unstarted work back, and a restart finishes
the batch with every custom_id exactly once."""
from __future__ import annotations

import signal

from tests.conftest import TINY
from tests.live import Deployment, chat_lines, jsonl, read_lines, wait_batch

N = 80


def _submit(c, n: int = N, max_tokens: int = 300):
    rows = chat_lines(n, TINY, max_tokens=max_tokens)
    f = c.files.create(file=("work.jsonl", jsonl(rows)), purpose="batch")
    return rows, c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")


def _exactly_once(c, b, rows) -> None:
    assert b.status == "completed", b
    out, err = read_lines(c, b.output_file_id), read_lines(c, b.error_file_id)
    assert err == [], err[:3]
    assert sorted(o["custom_id"] for o in out) == sorted(r["custom_id"] for r in rows)


def test_serve_stops_cleanly_and_restarts_finish_the_batch(tmp_path, tiny_model):
    """`serve` is the embedded default, so SQLite: `docker stop` (SIGTERM to the supervisor), a restart,
    then Ctrl-C (SIGINT to the whole process group), a restart, and the batch finishes."""
    d = Deployment(tmp_path, "", f"{TINY}={tiny_model}")
    try:
        d.start_serve()
        d.wait_serving()
        c = d.client()
        rows, b = _submit(c)
        name = "serve"
        for n, (sig, group) in enumerate([(signal.SIGTERM, False), (signal.SIGINT, True)]):
            mid = wait_batch(c, b.id, until=lambda x: x.request_counts.completed >= 20 * (n + 1))
            assert mid.request_counts.completed < N
            assert d.signal(name, sig, group=group) < 10.0
            assert "did not stop" not in d.log(name), "a role had to be killed"
            name = f"serve{n}"
            d.start_serve(name)
            d.wait_serving(name)
        _exactly_once(c, wait_batch(c, b.id, timeout=120), rows)
    finally:
        d.stop()


def test_worker_sigterm_hands_work_back(make_deployment):
    d = make_deployment().start_all()
    c = d.client()
    rows, b = _submit(c, n=40)
    wait_batch(c, b.id, until=lambda x: x.request_counts.completed >= 8)
    assert d.signal("worker", signal.SIGTERM) < 10.0
    assert "unfinished work handed back" in d.log("worker")
    d.start("worker", "worker2")
    d.wait_ready()
    _exactly_once(c, wait_batch(c, b.id, timeout=120), rows)
