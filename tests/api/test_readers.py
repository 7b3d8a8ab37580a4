"""GET routes read through the read-only engine: they never take (or wait for) SQLite's write lock,
and a download holds no session or pooled connection while it streams."""
from __future__ import annotations

import sqlite3
import time

import pytest
from sqlalchemy.orm import sessionmaker

from tests.api.conftest import in_process_api
from tests.conftest import TINY
from tests.live import chat_lines, jsonl


@pytest.fixture
def api(tmp_path, tiny_model):
    with in_process_api(tmp_path, f"{TINY}={tiny_model}") as a:
        yield a


def _upload(http, data: bytes, name: str = "in.jsonl") -> dict:
    r = http.post("/files", files={"file": (name, data)}, data={"purpose": "batch"})
    assert r.status_code == 200, r.text
    return r.json()


def test_get_routes_answer_while_a_writer_holds_the_lock(api):
    http = api.http(timeout=5)
    f = _upload(http, jsonl(chat_lines(2, TINY)))
    b = http.post("/batches", json={"input_file_id": f["id"], "endpoint": "/v1/chat/completions",
                                    "completion_window": "24h"}).json()
    lock = sqlite3.connect(api.state.settings.sqlite_path, isolation_level=None, timeout=60)
    lock.execute("BEGIN IMMEDIATE")            # a worker's long result write, say
    try:
        for path in (f"/batches/{b['id']}", "/batches", "/files", f"/files/{f['id']}",
                     f"/files/{f['id']}/content", "/models"):
            t0 = time.time()
            r = http.get(path)                 # a writer's BEGIN IMMEDIATE would wait here (busy timeout 60 s)
            assert r.status_code == 200, (path, r.text)
            assert time.time() - t0 < 2, path
    finally:
        lock.execute("ROLLBACK")
        lock.close()


def test_download_holds_no_connection_while_streaming(api):
    http = api.http()
    data = b"x" * (8 << 20)                   # far more than the socket buffers: the server stays mid-stream
    f = _upload(http, data, "big.jsonl")
    pools = [m.kw["bind"].pool for m in vars(api.state).values() if isinstance(m, sessionmaker)]
    with http.stream("GET", f"/files/{f['id']}/content") as r:
        assert r.status_code == 200 and r.headers["content-length"] == str(len(data))
        it = r.iter_bytes()
        got = len(next(it))
        time.sleep(0.3)
        assert pools and all(p.checkedout() == 0 for p in pools), "a session is held open during the download"
        got += sum(len(c) for c in it)
    assert got == len(data)
