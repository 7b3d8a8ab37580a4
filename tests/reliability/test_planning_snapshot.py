"""A planning round reads a snapshot and writes in a short transaction: a worker's claim made while
the policy runs neither waits for the round nor loses its chunk, and every request stays planned once."""
from __future__ import annotations

import threading
import time

from sqlalchemy import func, select

from blendserve.core.models import Chunk, Request
from blendserve.scheduler import intake, planning
from blendserve.scheduler.service import Scheduler
from blendserve.worker import claims
from tests.conftest import TINY
from tests.live import chat_lines
from tests.reliability.inproc import add_batch, settings, status


class SlowFCFS(planning.FCFS):
    """File order, after a pause long enough to see who waits for the round."""

    def __init__(self) -> None:
        self.running = threading.Event()

    def pieces(self, r: planning.Round) -> list[planning.Piece]:
        self.running.set()
        time.sleep(2.0)
        return super().pieces(r)


def test_a_claim_during_planning_neither_waits_nor_loses_its_chunk(tmp_path, backend, tiny_model):
    sched = Scheduler(settings(tmp_path, backend, tiny_model, chunk_requests=4, plan_max_requests=1))
    assert sched.lead()
    first = add_batch(sched.sessions, sched.store, chat_lines(12, TINY), age=2)
    deadline = time.time() + 30
    while not _count(sched, Request.batch_id == first, Request.status == "planned") == 12:
        sched.tick()
        assert time.time() < deadline
    second = add_batch(sched.sessions, sched.store, chat_lines(12, TINY, prefix="more "), age=1)
    while _count(sched, Request.batch_id == second, Request.status == "pending") < 12:
        sched._validate_next()
        intake.tokenize_queued(sched.sessions, sched.store, sched.models())
        assert time.time() < deadline
    assert status(sched.sessions, second).status == "in_progress"

    slow = SlowFCFS()
    rnd = threading.Thread(target=planning.plan_round,
                           args=(sched.sessions, sched.settings, slow), kwargs={"readers": sched.readers})
    rnd.start()
    assert slow.running.wait(30)
    t0 = time.time()
    got = claims.claim(sched.lease_sessions, "worker_test", TINY, 30)
    waited = time.time() - t0
    rnd.join()
    assert got is not None, "the claim found no chunk: the round held them"
    cid = got.id
    assert waited < 1.0, f"the claim waited {waited:.1f}s for the planning round"
    with sched.sessions() as s:
        held = s.scalars(select(Request.id).where(Request.chunk_id == cid)).all()
        assert len(held) == 4 and s.get(Chunk, cid).status == "claimed"
    live = select(Chunk.id)
    assert _count(sched, Request.status == "planned", Request.chunk_id.in_(live)) == 24
    assert _count(sched, Request.status == "planned", Request.chunk_id.not_in(live)) == 0


def _count(sched: Scheduler, *where) -> int:
    with sched.sessions() as s:
        return s.scalar(select(func.count()).select_from(Request).where(*where))
