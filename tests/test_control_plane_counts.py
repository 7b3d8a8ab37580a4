"""Batch counters (docs/design.md §10): a result written twice (a re-run chunk, a lost lease) is counted once,
and the status poll's counts and usage equal an aggregate over the request rows."""
from __future__ import annotations

import time

from sqlalchemy import case, func, select

from blendserve.api.status import batch_status
from blendserve.core.config import Settings
from blendserve.core.db import make_engine, make_sessionmaker
from blendserve.core.models import Batch, File, Request
from blendserve.migrations.upgrade import upgrade
from blendserve.worker import writes
from tests.live import pg_schema_url


def _result(rid: int, status: str = "completed", out: int = 5) -> dict:
    return {"b_id": rid, "b_status": status, "b_response": {"ok": rid} if status == "completed" else None,
            "b_error": None if status == "completed" else {"code": "server_error", "message": "x"},
            "b_out": out, "b_cached": 2}


def test_results_written_twice_are_counted_once(tmp_path, backend):
    settings = Settings(data_dir=tmp_path, database_url="" if backend == "sqlite" else pg_schema_url())
    upgrade(settings.db_url)
    sessions = make_sessionmaker(make_engine(settings.db_url))
    now = int(time.time())
    with sessions.begin() as s:
        s.add(File(id="file-in", owner="o", filename="in.jsonl", purpose="batch", bytes=0, created_at=now))
        s.add(Batch(id="batch_x", owner="o", endpoint="/v1/chat/completions", model="m", input_file_id="file-in",
                    completion_window="24h", status="in_progress", created_at=now, in_progress_at=now,
                    expires_at=now + 3600, total=5))
        for line in range(5):
            s.add(Request(batch_id="batch_x", line=line, custom_id=f"c{line}", model="m", body={}, prompt_ids=b"",
                          prompt_tokens=10 + line, max_tokens=8, status="planned"))
    with sessions() as s:
        ids = s.scalars(select(Request.id).order_by(Request.line)).all()
    with sessions.begin() as s:
        writes.store(s, [("worker_a", r) for r in (_result(ids[0]), _result(ids[1]), _result(ids[2], "failed"))], 1.0)
    with sessions.begin() as s:     # a second worker re-ran the chunk: only ids[3] is new
        writes.store(s, [("worker_b", r) for r in (_result(ids[0], out=99), _result(ids[1]), _result(ids[3]))], 2.0)

    with sessions() as s:
        got = batch_status(s, "o", "batch_x")
        done = Request.status == "completed"
        want = s.execute(select(func.sum(case((done, 1), else_=0)),
                                func.sum(case((Request.status == "failed", 1), else_=0)),
                                func.sum(case((done, Request.prompt_tokens), else_=0)),
                                func.sum(case((done, Request.completion_tokens), else_=0)))).one()
    assert tuple(want) == (3, 1, 10 + 11 + 13, 15)
    assert got["request_counts"] == {"total": 5, "completed": 3, "failed": 1}
    assert got["usage"]["input_tokens"] == 34 and got["usage"]["output_tokens"] == 15
    assert got["usage"]["input_tokens_details"]["cached_tokens"] == 6


def test_idle_ranks_back_off_between_empty_claims():
    from blendserve.worker.ranks import IDLE_BACKOFF, idle_wait

    waits = [idle_wait(0.1, n) for n in range(1, 10)]
    assert 0.075 <= waits[0] <= 0.1 and all(w <= 0.1 * IDLE_BACKOFF for w in waits)
    assert min(waits[4:]) >= 0.075 * IDLE_BACKOFF, "backs off to IDLE_BACKOFF poll intervals"
