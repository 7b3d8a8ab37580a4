"""The worker's engine loop at cluster scale (docs/design.md §10).

The cancel epoch (blendserve/worker/engines/base.py): an engine skips its per-request
cancellation checks while nothing was cancelled, and still drops cancelled work
at the next step: a cancelled batch, a lost claim, a stop, an interactive caller
who left. Claims ahead (blendserve/worker/service.py): the next chunk is claimed before the
engine asks for its first request, and a clean stop hands it back unrun."""
from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import func, select, update

from blendserve.core.config import Settings
from blendserve.core.db import make_engine, make_sessionmaker
from blendserve.core.engine_settings import EchoSettings
from blendserve.core.models import Batch, Chunk, Request
from blendserve.migrations.upgrade import upgrade
from blendserve.worker.engines.base import GenRequest, SamplingParams
from blendserve.worker.engines.echo import EchoEngine
from blendserve.worker.lane import Lane
from blendserve.worker.service import WorkerService
from tests.live import pg_schema_url
from tests.reliability.inproc import planned_chunk, running_batch


def _req(key: int, n: int) -> GenRequest:
    return GenRequest(key=key, input_ids=[1, 2, 3], params=SamplingParams(max_tokens=n))


def _until(cond, timeout: float) -> float:
    """Seconds until `cond()` held; fails the test past `timeout`."""
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < timeout, "timed out"
        time.sleep(0.02)
    return time.monotonic() - t0


def test_the_echo_engine_asks_only_when_the_epoch_moved():
    e = EchoEngine("m", tokens_per_s=20, prefill_tokens_per_s=1e9, max_running=8, config=EchoSettings())
    asked: list[int] = []
    gone: set[int] = set()
    epoch = [0]

    def cancelled(key: int) -> bool:
        asked.append(key)
        return key in gone

    out: list[int] = []
    t = threading.Thread(target=lambda: out.extend(r.key for r in e.generate(
        [_req(i, 40) for i in range(4)], cancelled=cancelled, cancel_epoch=lambda: epoch[0])))
    t.start()                                       # 40 tokens at ~20/s: about 2 s, some 40 steps
    _until(lambda: len(asked) >= 4, 2.0)
    time.sleep(0.4)
    assert sorted(asked) == [0, 1, 2, 3]            # one pass at the first step, none since: nothing moved
    gone.add(2)
    time.sleep(0.2)
    assert len(asked) == 4                          # not cancelled as far as the engine can know yet
    epoch[0] += 1
    _until(lambda: len(asked) >= 8, 1.0)            # the next step asks every running request again
    t.join(10)
    assert sorted(out) == [0, 1, 3]                 # the cancelled one has no result
    assert len(asked) == 8

    asked.clear()                                   # without an epoch: every step asks every request
    list(e.generate([_req(i, 10) for i in range(4)], cancelled=cancelled))
    assert len(asked) >= 4 * 5


def test_every_engine_takes_the_epoch():
    """The worker always passes `cancel_epoch` (Engine.generate), so every engine must accept it."""
    import inspect

    from blendserve.worker.engines.cpu.engine import CpuEngine
    from blendserve.worker.engines.sglang import SGLangEngine
    from blendserve.worker.engines.vllm import VllmEngine

    for cls in (EchoEngine, CpuEngine, SGLangEngine, VllmEngine):
        assert "cancel_epoch" in inspect.signature(cls.generate).parameters, cls.__name__


def test_a_lane_cancel_of_a_running_request_moves_its_count():
    lane = Lane(max_batch=4, max_wait_s=0.0)
    a, b = _req(lane.new_key(), 5), _req(lane.new_key(), 5)
    lane.put(a)
    lane.put(b)
    lane.cancel(a.key)                              # still waiting: dropped there, the engine never sees it
    assert lane.cancels == 0
    assert lane.take() == [b]
    lane.cancel(b.key)                              # running: the engine must look again
    assert lane.cancels == 1 and lane.cancelled(b.key)


# -- the worker service: its epoch moves for each way a running request can be cancelled ----------------


@pytest.fixture
def make_worker(tmp_path, backend):
    """make_worker(chunks, max_running): a WorkerService over an echo engine and a batch of `chunks`
    pending chunks of 8 long requests each (2,000 tokens at 50/s: 40 s); returns (service, engine,
    sessions, start, stop), where start() runs the service in a thread until `running` requests run.
    Stops the service at the end."""
    made = []

    def make(chunks: int = 1, max_running: int = 16):
        st = Settings(data_dir=tmp_path, database_url="" if backend == "sqlite" else pg_schema_url(),
                      lease_seconds=3, poll_interval_s=0.05, interactive=False)
        upgrade(st.db_url)
        engine = make_engine(st.db_url)
        sessions = make_sessionmaker(engine)
        running_batch(sessions, total=8 * chunks)
        for c in range(chunks):
            planned_chunk(sessions, seq=c, size=8, max_tokens=2000)
        echo = EchoEngine("m", tokens_per_s=50, prefill_tokens_per_s=1e9, max_running=max_running,
                          config=EchoSettings())
        svc = WorkerService(st, echo, "echo")
        stop = threading.Event()
        thread = threading.Thread(target=svc.run, args=(stop,), daemon=True)

        def start(running: int = 8) -> None:
            thread.start()
            _until(lambda: echo.stats().running_sequences == running, 30.0)

        made.append((stop, thread, engine))
        return svc, echo, sessions, start, stop

    yield make
    for stop, thread, engine in made:
        stop.set()
        thread.join(10)
        engine.dispose()


@pytest.fixture
def worker(make_worker):
    return make_worker()


def _statuses(sessions) -> dict[str, int]:
    with sessions() as s:
        return dict(s.execute(select(Request.status, func.count()).group_by(Request.status)).all())


def _asked(svc: WorkerService) -> list[int]:
    """Every key the engine asks `_cancelled` about (the service passes its bound method per stream)."""
    asked: list[int] = []
    real = svc._cancelled

    def counted(key: int) -> bool:
        asked.append(key)
        return real(key)

    svc._cancelled = counted        # type: ignore[method-assign]
    return asked


def test_a_cancelled_batch_is_dropped_at_the_next_step_though_steps_skip_the_checks(worker):
    svc, echo, sessions, start, _ = worker
    asked = _asked(svc)
    start()
    time.sleep(1.5)                                 # a live-set re-read or more: nothing dropped, nothing moved
    n = len(asked)
    time.sleep(0.5)
    assert len(asked) == n, "steps asked every running request though nothing was cancelled"
    with sessions.begin() as s:
        s.execute(update(Batch).where(Batch.id == "batch_x").values(status="cancelling"))
    took = _until(lambda: echo.stats().running_sequences == 0, 5.0)
    assert took < 2.5                               # the live set is re-read once a second, then one step
    assert _statuses(sessions) == {"planned": 8}    # dropped without a result
    _until(lambda: _chunk_status(sessions) == "done", 5.0)     # released: nothing left to run in a live batch


def test_a_lost_claim_is_dropped_at_the_next_step(worker):
    svc, echo, sessions, start, _ = worker
    start()
    with sessions.begin() as s:                     # another worker took the chunk (its lease had lapsed)
        s.execute(update(Chunk).values(worker_id="worker_other"))
    took = _until(lambda: echo.stats().running_sequences == 0, 5.0)
    assert took < 2.5                               # the heartbeat renews every lease/3 = 1 s
    assert svc.ledger.losses >= 1 and _statuses(sessions) == {"planned": 8}


def test_a_stop_drops_running_work_and_hands_its_chunk_back(worker):
    svc, echo, sessions, start, stop = worker
    start()
    t0 = time.monotonic()
    stop.set()
    _until(lambda: echo.stats().running_sequences == 0, 5.0)
    assert time.monotonic() - t0 < 1.0              # at the next step (50 ms), not after 40 s
    _until(lambda: _chunk_status(sessions) == "pending", 5.0)
    assert _statuses(sessions) == {"planned": 8}


def _chunk_status(sessions) -> str:
    with sessions() as s:
        return s.scalar(select(Chunk.status))


def test_the_next_chunk_is_claimed_before_the_engine_asks_for_it(make_worker):
    """Chunks of 8, room for 7: the engine runs 7 of the first chunk and waits for room, and the second
    chunk is already claimed (the first's second half began to be admitted), so no claim's transaction
    stands between the engine and its next request when a slot frees."""
    svc, echo, sessions, start, stop = make_worker(chunks=2, max_running=7)
    start(running=7)
    with sessions() as s:
        first = s.scalar(select(Chunk.id).where(Chunk.seq == 0))

    def claimed() -> list[tuple[int, str]]:
        with sessions() as s:
            return sorted(s.execute(select(Chunk.id, Chunk.status).where(Chunk.worker_id == svc.id)).all())

    _until(lambda: len(claimed()) == 2, 5.0)
    assert [st for _, st in claimed()] == ["claimed", "claimed"]
    with sessions() as s:
        running = set(s.scalars(select(Request.chunk_id).where(Request.id.in_(list(svc.ledger.meta)))))
    assert running == {first} and echo.stats().running_sequences == 7      # none of the second admitted yet
    stop.set()                                      # a clean stop hands both back, the one never fed too
    _until(lambda: not claimed(), 10.0)
    with sessions() as s:
        assert s.execute(select(Chunk.status, Chunk.attempts)).all() == [("pending", 0), ("pending", 0)]
