"""Retention: expires_after / output_expires_after, expired files deleted with their rows, temp files swept."""
from __future__ import annotations

import os
import time

import pytest

from blendserve.core.config import Settings
from blendserve.core.db import make_engine, make_sessionmaker
from blendserve.core.models import Batch, File
from blendserve.core.storage import FileStore
from blendserve.migrations.upgrade import upgrade
from blendserve.scheduler import retention
from tests.conftest import TINY
from tests.live import chat_lines, pg_schema_url, run_batch


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path):
    settings = Settings(data_dir=tmp_path, database_url="" if request.param == "sqlite" else pg_schema_url())
    upgrade(settings.db_url)
    return make_sessionmaker(make_engine(settings.db_url)), FileStore(settings.files_dir)


def _file(store: FileStore, sessions, fid: str, created: int, expires: int | None) -> None:
    with store.open_writer(fid) as w:
        w.write(b"x\n")
        w.commit()
    with sessions.begin() as s:
        s.add(File(id=fid, owner="", filename=f"{fid}.jsonl", purpose="batch", bytes=2, created_at=created,
                   expires_at=expires))


def _batch(sessions, bid: str, status: str, input_id: str, out_id: str | None = None,
           out_s: int | None = None) -> None:
    now = int(time.time())
    with sessions.begin() as s:
        s.add(Batch(id=bid, owner="", endpoint="/v1/chat/completions", input_file_id=input_id,
                    completion_window="24h", status=status, created_at=now, expires_at=now + 86400, total=1,
                    output_file_id=out_id, output_expires_after_s=out_s))


def test_expired_files_go_with_their_rows_but_a_running_input_stays(db):
    sessions, store = db
    now = int(time.time())
    _file(store, sessions, "file-old", now - 7200, now - 10)          # expired
    _file(store, sessions, "file-new", now, now + 7200)               # not yet
    _file(store, sessions, "file-forever", now - 7200, None)          # no policy
    _file(store, sessions, "file-running-input", now - 7200, now - 10)  # expired, but a batch still reads it
    _file(store, sessions, "file-done-input", now - 7200, now - 10)
    _file(store, sessions, "file-out", now - 100, None)
    _batch(sessions, "batch_run", "in_progress", "file-running-input")
    _batch(sessions, "batch_done", "completed", "file-done-input", out_id="file-out", out_s=3600)
    got = retention.sweep(sessions, store, now)
    with sessions() as s:
        left = {f.id: f.expires_at for f in s.query(File)}
    assert set(left) == {"file-new", "file-forever", "file-running-input", "file-out"}
    assert left["file-out"] == now - 100 + 3600                       # output_expires_after stamped
    assert not store.path("file-old").exists() and not store.path("file-done-input").exists()
    assert store.path("file-running-input").exists()
    assert (got.deleted, got.stamped) == (2, 1)
    # Once it expires, the output file goes too.
    assert retention.sweep(sessions, store, now + 3600).deleted == 1
    assert not store.path("file-out").exists()


def test_dead_writers_temp_files_are_swept(tmp_path):
    store = FileStore(tmp_path)
    old, fresh = store.open_writer("file-a"), store.open_writer("file-b")
    old.f.close(), fresh.f.close()
    past = time.time() - 7200
    os.utime(old.tmp, (past, past))
    assert store.sweep_temp() == 1
    assert not old.tmp.exists() and fresh.tmp.exists()


def test_output_expires_after_through_the_service(deployment):
    c = deployment.client()
    b = run_batch(c, chat_lines(2, TINY), output_expires_after={"anchor": "created_at", "seconds": 3600})
    assert b.status == "completed", b.errors
    f = c.files.retrieve(b.output_file_id)
    deadline = time.time() + 10
    while f.expires_at is None and time.time() < deadline:    # stamped by the scheduler's next tick
        time.sleep(0.1)
        f = c.files.retrieve(b.output_file_id)
    assert f.expires_at == f.created_at + 3600
    import openai
    with pytest.raises(openai.BadRequestError) as e:
        c.batches.create(input_file_id=b.input_file_id, endpoint="/v1/chat/completions", completion_window="24h",
                         output_expires_after={"anchor": "created_at", "seconds": 60})
    assert e.value.body["param"].startswith("output_expires_after")
