"""A running batch's finished lines: GET /v1/batches/{id}/output and `blendserve submit --follow`.

On the real service (API, scheduler and an echo worker as processes, SQLite and PostgreSQL): lines are read
while the batch runs, a reader resumes from its cursor across an API restart and gets every custom_id
exactly once, each line equal to the one the output or error file holds; other tenants get a 404. And the
numbering itself, on both databases: a result that commits after a later-stamped one is numbered after
it, so a reader at any cursor still gets it.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy import select, update

from blendserve.api.routes.outputs import finished_lines
from blendserve.core.db import make_engine, make_sessionmaker
from blendserve.core.models import Batch, Request
from blendserve.migrations.upgrade import upgrade
from blendserve.scheduler import outputs
from tests.conftest import TINY
from tests.live import chat_lines, jsonl, pg_schema_url, read_lines, wait_batch

ALPHA, BETA = "sk-alpha-partial-1", "sk-beta-partial-1"
N = 240


@pytest.fixture(scope="module")
def service(make_deployment):
    """Echo replies of 20 tokens at 50 tokens/s, 8 at a time: a batch of N runs ~15 s, results all along."""
    d = make_deployment(BLENDSERVE_API_KEYS=f"alpha:{ALPHA},beta:{BETA}", BLENDSERVE_ECHO_TOKENS_PER_S="50",
                        BLENDSERVE_ECHO_MAX_RUNNING="8")
    d.start("api")
    d.start("scheduler")
    d.start("worker", "worker", "--engine", "echo")
    d.wait_ready()
    return d


def _bare(line: dict) -> dict:
    """A line less its random ids, which differ between any two writes of it."""
    out = {k: v for k, v in line.items() if k != "id"}
    if out.get("response"):
        out["response"] = {k: v for k, v in out["response"].items() if k != "request_id"}
    return out


def _lines_of(path) -> list[str]:
    return [x for x in open(path).read().split("\n") if x]


def test_follow_prints_lines_while_running_and_across_an_api_restart(service, tmp_path):
    rows = chat_lines(N, TINY, max_tokens=20)
    (tmp_path / "in.jsonl").write_bytes(jsonl(rows))
    env = {**os.environ, "OPENAI_BASE_URL": service.base_url, "OPENAI_API_KEY": ALPHA}
    cli = subprocess.Popen([sys.executable, "-m", "blendserve", "submit", str(tmp_path / "in.jsonl"), "--follow",
                            "--poll", "0.2", "--output", str(tmp_path / "out.jsonl")], env=env,
                           stdout=open(tmp_path / "stdout", "wb"), stderr=open(tmp_path / "stderr", "wb"))
    try:
        deadline = time.time() + 120
        while len(_lines_of(tmp_path / "stdout")) < 20 and time.time() < deadline:
            time.sleep(0.1)
        batch_id = open(tmp_path / "stderr").read().split()[0]
        b = service.client(ALPHA).batches.retrieve(batch_id)
        before = len(_lines_of(tmp_path / "stdout"))
        assert before >= 20 and b.status == "in_progress" and b.request_counts.completed < N, (before, b)
        service.kill("api")
        time.sleep(1.0)
        service.start("api")
        service.wait_ready()
        assert cli.wait(180) == 0, open(tmp_path / "stderr").read()
    finally:
        if cli.poll() is None:
            cli.kill()
    printed = [json.loads(x) for x in _lines_of(tmp_path / "stdout")]
    assert before < N, "the restart happened with lines still to come"
    assert sorted(p["custom_id"] for p in printed) == sorted(r["custom_id"] for r in rows), "each exactly once"
    in_file = {x["custom_id"]: _bare(x) for x in map(json.loads, _lines_of(tmp_path / "out.jsonl"))}
    assert [_bare(p) for p in printed] == [in_file[p["custom_id"]] for p in printed], "the output file's lines"


def _page(d, batch_id: str, key: str, after: int = 0, limit: int = 1000) -> httpx.Response:
    return httpx.get(f"{d.base_url}/batches/{batch_id}/output", params={"after": after, "limit": limit},
                     headers={"Authorization": f"Bearer {key}"}, timeout=30)


def test_pages_limit_cursor_error_lines_and_tenants(service):
    c = service.client(ALPHA)
    rows = chat_lines(80, TINY, max_tokens=40)     # ~8 s: time to read a few lines, then cancel mid-run
    f = c.files.create(file=("in.jsonl", jsonl(rows)), purpose="batch")
    b = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert _page(service, b.id, BETA).status_code == 404          # another tenant's batch: not there at all
    assert _page(service, "batch_" + "0" * 24, ALPHA).status_code == 404
    assert _page(service, b.id, ALPHA, after=-1).status_code == 400
    got: list[dict] = []
    cursor = 0
    while len(got) < 5:
        r = _page(service, b.id, ALPHA, after=cursor, limit=3)
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/jsonl")
        assert len(r.text.splitlines()) <= 3 and r.headers["X-BlendServe-Done"] == "false"
        got += [json.loads(x) for x in r.text.splitlines()]
        cursor = int(r.headers["X-BlendServe-Cursor"])
        time.sleep(0.1)
    assert cursor == len(got)            # out_seq counts a batch's finished lines from 1
    c.batches.cancel(b.id)
    while True:
        r = _page(service, b.id, ALPHA, after=cursor, limit=7)
        got += [json.loads(x) for x in r.text.splitlines()]
        cursor = int(r.headers["X-BlendServe-Cursor"])
        if r.headers["X-BlendServe-Done"] == "true":
            break
        time.sleep(0.05)
    b = wait_batch(c, b.id)
    assert b.status == "cancelled"
    assert sorted(x["custom_id"] for x in got) == sorted(r["custom_id"] for r in rows), "each exactly once"
    in_files = {x["custom_id"]: _bare(x) for x in read_lines(c, b.output_file_id) + read_lines(c, b.error_file_id)}
    assert [_bare(x) for x in got] == [in_files[x["custom_id"]] for x in got]
    assert {x["error"]["code"] for x in got if x["error"]} == {"batch_cancelled"}
    done = _page(service, b.id, ALPHA, after=cursor)
    assert done.text == "" and done.headers["X-BlendServe-Done"] == "true"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):      # the docs' httpx script, as written
        exec(_docs_script(service.base_url, ALPHA), {"batch_id": b.id})
    assert printed.getvalue().split() == [x["custom_id"] for x in got]


def _docs_script(base_url: str, key: str) -> str:
    page = (Path(__file__).parent.parent / "docs" / "batch-api.md").read_text()
    script = page.split("## Results while a batch runs")[1].split("```python\n")[1].split("```")[0]
    assert len(script.strip().splitlines()) <= 12
    return script.replace("http://127.0.0.1:8000/v1", base_url).replace("sk-...", key)


def _rows(url: str, n: int):
    upgrade(url)
    sessions = make_sessionmaker(make_engine(url))
    with sessions.begin() as s:
        s.add(Batch(id="batch_order", owner="", endpoint="/v1/chat/completions", input_file_id="file-x",
                    completion_window="24h", status="in_progress", created_at=0, expires_at=2 ** 31 - 1, total=n))
        s.flush()
        s.add_all([Request(batch_id="batch_order", line=i, custom_id=f"c{i}", model="m", body={},
                           status="planned") for i in range(n)])
    with sessions() as s:
        ids = s.scalars(select(Request.id).order_by(Request.line)).all()
    return sessions, ids


def _finish(conn, rid: int, at: float) -> None:
    conn.execute(update(Request).where(Request.id == rid).values(status="completed", finished_at=at,
                                                                   response={"n": rid}))


def test_a_late_commit_is_numbered_after_what_was_read(backend, tmp_path):
    """Results stamped 10, 30, then one stamped 20 that commits last (on PostgreSQL: its transaction is still
    open while the scheduler numbers): paging by finished_at would skip it past cursor 30; out_seq does not."""
    url = f"sqlite:///{tmp_path / 'order.db'}" if backend == "sqlite" else pg_schema_url()
    sessions, (a, late, b, d, e) = _rows(url, 5)
    engine = sessions.kw["bind"]
    with engine.begin() as c:
        _finish(c, a, 10.0)
        _finish(c, b, 30.0)
    pending = engine.connect()
    if backend == "postgresql":      # the worker's transaction holds its result, uncommitted, through numbering
        pending.begin()
        _finish(pending, late, 20.0)
    assert outputs.number_finished(sessions) == 2
    with sessions() as s:
        first, cursor, done = finished_lines(s, "", "batch_order", 0, 100)
    assert [json.loads(x)["custom_id"] for x in first.splitlines()] == ["c0", "c2"] and cursor == 2 and not done
    if backend == "postgresql":
        pending.commit()
    else:
        with pending.begin():
            _finish(pending, late, 20.0)
    pending.close()
    with engine.begin() as c:
        _finish(c, d, 40.0)
        _finish(c, e, 5.0)
    assert outputs.number_batch(sessions, "batch_order", page=2) == 2     # a page: the oldest stamps first
    assert outputs.number_finished(sessions) == 1
    with sessions() as s:
        seq = dict(s.execute(select(Request.custom_id, Request.out_seq)).all())
        again, cursor, done = finished_lines(s, "", "batch_order", 2, 100)
    assert seq == {"c0": 1, "c2": 2, "c4": 3, "c1": 4, "c3": 5}
    assert [json.loads(x)["custom_id"] for x in again.splitlines()] == ["c4", "c1", "c3"] and cursor == 5
    assert not done                                       # still running: more may come
    with sessions.begin() as s:
        s.execute(update(Batch).values(status="completed"))
    with sessions() as s:
        last, cursor, done = finished_lines(s, "", "batch_order", 4, 1)
        assert json.loads(last)["custom_id"] == "c3" and cursor == 5 and not done     # a full page: ask once more
        assert finished_lines(s, "", "batch_order", 5, 100) == (b"", 5, True)
    engine.dispose()


def test_a_validating_batch_is_not_numbered(backend, tmp_path):
    """Its rows can still be deleted and written again by a restarted validation."""
    url = f"sqlite:///{tmp_path / 'validating.db'}" if backend == "sqlite" else pg_schema_url()
    sessions, ids = _rows(url, 2)
    with sessions.begin() as s:
        s.execute(update(Batch).values(status="validating"))
        _finish(s.connection(), ids[0], 1.0)
    assert outputs.number_finished(sessions) == 0
    with sessions.begin() as s:
        s.execute(update(Batch).values(status="in_progress"))
    assert outputs.number_finished(sessions) == 1
    with sessions() as s:
        assert s.scalar(select(sa.func.max(Request.out_seq))) == 1
    sessions.kw["bind"].dispose()


def test_a_browser_page_may_read_the_cursor(tmp_path, tiny_model):
    """With CORS on, the cursor headers are exposed to the page's script, which would otherwise not see them."""
    from tests.api.conftest import in_process_api

    with in_process_api(tmp_path, f"{TINY}={tiny_model}", api_keys="k1", cors_origins="https://app.example") as api:
        r = httpx.get(f"{api.base_url}/batches/batch_{'0' * 24}/output",
                      headers={"Origin": "https://app.example", "Authorization": "Bearer k1"})
    assert r.status_code == 404 and r.headers["access-control-allow-origin"] == "https://app.example"
    exposed = {h.strip().lower() for h in r.headers["access-control-expose-headers"].split(",")}
    assert {"x-blendserve-cursor", "x-blendserve-done"} <= exposed
