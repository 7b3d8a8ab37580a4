"""A batch's first result waits on no poll (docs/design.md §4.1): with nothing planned a round starts at once,
whatever T_max says; beside a planned backlog new work waits for N_max; and the doorbells wake idle roles."""
from __future__ import annotations

import threading
import time

import orjson
from sqlalchemy import func, select

from blendserve.core.bell import Bell, ring
from blendserve.core.config import Settings
from blendserve.core.db import make_engine, make_sessionmaker
from blendserve.core.engine_settings import EchoSettings
from blendserve.core.models import Chunk, Request
from blendserve.migrations.upgrade import upgrade
from blendserve.scheduler import planning
from blendserve.scheduler.service import Scheduler
from blendserve.worker.engines.echo import EchoEngine
from blendserve.worker.service import WorkerService
from tests.api.conftest import in_process_api
from tests.conftest import TINY
from tests.live import chat_lines, pg_schema_url
from tests.reliability.inproc import add_batch, planned_chunk, running_batch, settings
from tests.test_control_plane_planning import _admit, _round


def test_nothing_planned_plans_at_once_and_a_backlog_waits_for_n_max(tmp_path, backend, tiny_model):
    sched = Scheduler(settings(tmp_path, backend, tiny_model, chunk_requests=4, plan_max_requests=100,
                               plan_max_wait_s=3600.0))
    assert sched.lead()
    first = add_batch(sched.sessions, sched.store, chat_lines(12, TINY), age=0)
    _admit(sched, first)
    assert _round(sched) == 12, "an idle model's new work must be planned at once, not after T_max"
    second = add_batch(sched.sessions, sched.store, chat_lines(6, TINY, prefix="more "), age=0)
    _admit(sched, second)
    assert _round(sched) == 0, "beside a planned backlog, new work waits for N_max or the backlog to drain"
    with sched.sessions.begin() as s:        # the backlog is claimed: nothing planned is left
        for c in s.scalars(select(Chunk).where(Chunk.status == "pending")):
            c.status, c.worker_id = "claimed", "w"
    assert _round(sched) == 6
    with sched.sessions() as s:
        assert s.scalar(select(func.count()).where(Request.status == "pending")) == 0


def test_a_ring_wakes_a_waiter_at_once_and_only_once(tmp_path):
    waiter = Bell(tmp_path, "chunks")
    assert not waiter.rang()
    t0 = time.monotonic()
    threading.Timer(0.1, ring, (tmp_path, "chunks")).start()
    assert waiter.wait(5.0)
    assert time.monotonic() - t0 < 1.0, "a ring must end the wait within a few watch periods"
    assert not waiter.rang(), "one ring wakes a waiter once"
    t0 = time.monotonic()
    assert not waiter.wait(0.2)              # no ring: the whole wait
    assert time.monotonic() - t0 >= 0.19
    stop = threading.Event()
    stop.set()
    assert not waiter.wait(5.0, stop)        # a stop ends it too


def test_a_ring_never_raises_where_the_bell_cannot_be_written(tmp_path):
    (tmp_path / "bells").write_text("a file where the folder should be")
    ring(tmp_path, "batches")                # the waiter falls back to its poll
    assert not Bell(tmp_path, "batches").rang()


def test_a_round_that_wrote_chunks_rings_the_workers_bell(tmp_path, backend, tiny_model):
    sched = Scheduler(settings(tmp_path, backend, tiny_model, chunk_requests=4))
    assert sched.lead()
    chunks = Bell(sched.settings.data_dir, "chunks")
    bid = add_batch(sched.sessions, sched.store, chat_lines(4, TINY), age=0)
    _admit(sched, bid)
    assert planning.plan_round(sched.sessions, sched.settings, sched.policy, readers=sched.readers) == 4
    assert chunks.rang()


def test_the_apis_create_and_cancel_ring_the_schedulers_bell(tmp_path, tiny_model):
    batches = Bell(tmp_path, "batches")
    with in_process_api(tmp_path, f"{TINY}={tiny_model}") as api, api.http() as http:
        fid = http.post("/files", files={"file": ("in.jsonl", b"".join(
            orjson.dumps(line) + b"\n" for line in chat_lines(2, TINY)))}, data={"purpose": "batch"}).json()["id"]
        assert not batches.rang()
        bid = http.post("/batches", json={"input_file_id": fid, "endpoint": "/v1/chat/completions",
                                          "completion_window": "24h"}).json()["id"]
        assert batches.rang()
        assert http.post(f"/batches/{bid}/cancel").status_code == 200
        assert batches.rang()


def test_a_backed_off_worker_claims_a_rounds_chunk_as_soon_as_the_bell_rings(tmp_path, backend):
    """An idle worker backs off its claims (up to 4 poll intervals, here 4 s): the scheduler's ring must
    end that back-off, both the wait and the process's empty-claim mark, or a batch's first chunk waits
    for it."""
    st = Settings(data_dir=tmp_path, database_url="" if backend == "sqlite" else pg_schema_url(),
                  lease_seconds=30, poll_interval_s=1.0, interactive=False)
    upgrade(st.db_url)
    engine = make_engine(st.db_url)
    sessions = make_sessionmaker(engine)
    running_batch(sessions, total=1)
    svc = WorkerService(st, EchoEngine("m", tokens_per_s=1e6, prefill_tokens_per_s=1e9, max_running=8,
                                       config=EchoSettings()), "echo")
    stop = threading.Event()
    thread = threading.Thread(target=svc.run, args=(stop,), daemon=True)
    thread.start()
    try:
        time.sleep(3.5)                          # three empty claims: the back-off is at 2-4 s now
        planned_chunk(sessions, seq=0, size=1, max_tokens=4)
        t0 = time.monotonic()
        ring(tmp_path, "chunks")
        while time.monotonic() - t0 < 5.0:
            with sessions() as s:
                if s.scalar(select(Chunk.status)) != "pending":
                    break
            time.sleep(0.01)
        assert time.monotonic() - t0 < 0.5, "the ring must end the worker's claim back-off"
    finally:
        stop.set()
        thread.join(10)
        engine.dispose()
