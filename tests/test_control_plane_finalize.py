"""Finalization of large batches (docs/design.md §10): the output is read a range of lines at a time (gaps in
line numbers, from blank lines, included), every custom_id comes out once and in line order, failed
requests go to the error file, and the scheduler lease is renewed while a long file is written."""
from __future__ import annotations

import json
import time

from sqlalchemy import update

from blendserve.core.config import Settings
from blendserve.core.db import make_engine, make_sessionmaker
from blendserve.core.models import Batch, File, Lease, Request
from blendserve.core.storage import FileStore
from blendserve.migrations.upgrade import upgrade
from blendserve.scheduler import lifecycle
from blendserve.scheduler.fencing import FencedSessions
from tests.live import pg_schema_url


class CountingSessions(FencedSessions):
    """Fenced sessions that count their write transactions (each one renews the lease)."""
    begun = 0

    def begin(self):
        self.begun += 1
        return super().begin()


def test_paged_finalize_writes_each_line_once_and_renews_the_lease(tmp_path, backend, monkeypatch):
    settings = Settings(data_dir=tmp_path, database_url="" if backend == "sqlite" else pg_schema_url())
    upgrade(settings.db_url)
    sessions = CountingSessions(make_engine(settings.db_url), "me", lease_s=30)
    store = FileStore(settings.files_dir)
    now = int(time.time())
    lines = [0, 1, 2, 5, 6, 7, 8, 20, 21, 33]               # blank lines leave gaps, some wider than a page
    with make_sessionmaker(sessions.kw["bind"]).begin() as s:       # take the scheduler lease
        s.execute(update(Lease).where(Lease.name == "scheduler").values(holder="me", until=time.time() + 30))
    monkeypatch.setattr(lifecycle, "PAGE", 3)
    monkeypatch.setattr(lifecycle, "RENEW_EVERY_S", 0.0)
    with sessions.begin() as s:
        s.add(File(id="file-in", owner="", filename="in.jsonl", purpose="batch", bytes=0, created_at=now))
        s.add(Batch(id="batch_x", owner="", endpoint="/v1/chat/completions", model="m", input_file_id="file-in",
                    completion_window="24h", status="in_progress", created_at=now, in_progress_at=now,
                    expires_at=now + 3600, total=len(lines)))
        for line in lines:
            ok = line != 6
            s.add(Request(batch_id="batch_x", line=line, custom_id=f"c{line}", model="m", body={}, prompt_ids=b"",
                          prompt_tokens=1, max_tokens=1, status="completed" if ok else "failed",
                          response={"n": line, "text": "caf\u00e9"} if ok else None,
                          error=None if ok else {"code": "server_error", "message": "boom"}))
    with sessions() as s:
        before = s.get(Lease, "scheduler").until
    time.sleep(0.05)
    sessions.begun = 0
    lifecycle.settle(sessions, store)
    assert sessions.begun >= 12, "the lease was not renewed page by page"     # 12 pages of 3 lines
    with sessions() as s:
        b = s.get(Batch, "batch_x")
        after = s.get(Lease, "scheduler").until
    assert b.status == "completed" and after > before
    out = [json.loads(x) for x in store.path(b.output_file_id).read_bytes().splitlines()]
    err = [json.loads(x) for x in store.path(b.error_file_id).read_bytes().splitlines()]
    assert store.path(b.output_file_id).read_bytes().isascii()
    assert [x["custom_id"] for x in out] == [f"c{n}" for n in lines if n != 6]
    assert [x["response"]["body"] for x in out] == [{"n": n, "text": "caf\u00e9"} for n in lines if n != 6]
    assert all(x["error"] is None and x["response"]["status_code"] == 200 for x in out)
    assert err == [{"id": err[0]["id"], "custom_id": "c6", "response": None,
                    "error": {"code": "server_error", "message": "boom"}}]
