"""The scheduler carries on when one batch raises, cannot act once it lost its lease, and its status
transitions are conditional: a cancel racing completion cannot re-finalize the batch."""
from __future__ import annotations

import time

import pytest
from sqlalchemy import func, select, update

from blendserve.core.models import File, Lease, Request
from blendserve.scheduler.fencing import LostLease
from blendserve.scheduler.service import Scheduler
from tests.conftest import TINY
from tests.live import chat_lines
from tests.reliability.inproc import add_batch, settings, status


@pytest.fixture
def sched(tmp_path, backend, tiny_model) -> Scheduler:
    s = Scheduler(settings(tmp_path, backend, tiny_model))
    assert s.lead()
    return s


def _tick_until(sched: Scheduler, done, timeout: float = 30) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        sched.tick()
        if done():
            return
        time.sleep(0.05)
    raise TimeoutError


def test_a_batch_that_raises_fails_alone(sched):
    nul = chat_lines(3, TINY)
    nul[1]["custom_id"] = "bad\x00id"           # passed validation, then failed PostgreSQL's insert
    bad = add_batch(sched.sessions, sched.store, nul, age=3)
    broken = add_batch(sched.sessions, sched.store, chat_lines(2, TINY), age=2)
    fid = status(sched.sessions, broken).input_file_id
    sched.store.delete(fid)
    sched.store.path(fid).mkdir()               # reading it raises IsADirectoryError on every try
    good = add_batch(sched.sessions, sched.store, chat_lines(2, TINY), age=1)
    _tick_until(sched, lambda: status(sched.sessions, good).status == "in_progress")
    b = status(sched.sessions, bad)
    assert b.status == "failed" and [e["code"] for e in b.errors] == ["invalid_value"] and b.errors[0]["line"] == 2
    _tick_until(sched, lambda: status(sched.sessions, broken).status == "failed")
    assert status(sched.sessions, broken).errors[0]["code"] == "server_error"


def test_a_scheduler_that_lost_its_lease_cannot_act(sched):
    bid = add_batch(sched.sessions, sched.store, chat_lines(2, TINY))
    with sched.lease_sessions.begin() as s:        # a standby took over while this one stalled
        s.execute(update(Lease).values(holder="someone-else", until=time.time() + 30))
    with pytest.raises(LostLease):
        sched.tick()
    assert status(sched.sessions, bid).status == "validating"


def test_cancel_racing_completion_keeps_the_completed_batch(sched):
    bid = add_batch(sched.sessions, sched.store, chat_lines(1, TINY))
    _tick_until(sched, lambda: status(sched.sessions, bid).status == "in_progress")
    with sched.lease_sessions.begin() as s:        # the worker's result
        s.execute(update(Request).where(Request.batch_id == bid).values(
            status="completed", response={"choices": []}, finished_at=time.time()))
    _tick_until(sched, lambda: status(sched.sessions, bid).status == "completed")
    done = status(sched.sessions, bid)
    with sched.lease_sessions.begin() as s:        # the API's cancel that read `in_progress` just before
        s.execute(update(type(done)).where(type(done).id == bid).values(status="cancelling",
                                                                          cancelling_at=int(time.time())))
    with sched.sessions() as s:
        files = s.scalar(select(func.count()).select_from(File))
    _tick_until(sched, lambda: status(sched.sessions, bid).status != "cancelling")
    after = status(sched.sessions, bid)
    assert after.status == "completed" and after.cancelled_at is None
    assert after.output_file_id == done.output_file_id
    with sched.sessions() as s:
        assert s.scalar(select(func.count()).select_from(File)) == files
    assert sorted(p.name for p in sched.store.root.iterdir() if not p.name.startswith(".")) == \
        sorted([done.output_file_id, done.input_file_id])


def test_a_full_disk_in_finalize_retries_that_batch_and_the_tick_carries_on(sched, monkeypatch):
    import errno

    full = add_batch(sched.sessions, sched.store, chat_lines(1, TINY), age=2)
    _tick_until(sched, lambda: status(sched.sessions, full).status == "in_progress")
    with sched.lease_sessions.begin() as s:        # the worker's result
        s.execute(update(Request).where(Request.batch_id == full).values(
            status="completed", response={"choices": []}, finished_at=time.time()))

    def no_space(file_id):
        raise OSError(errno.ENOSPC, "No space left on device")

    other = add_batch(sched.sessions, sched.store, chat_lines(2, TINY), age=1)     # still validating
    monkeypatch.setattr(sched.store, "open_writer", no_space)
    _tick_until(sched, lambda: status(sched.sessions, other).status == "in_progress")   # the tick goes on
    for _ in range(5):
        sched.tick()
    assert status(sched.sessions, full).status == "finalizing"        # retried, neither lost nor failed
    monkeypatch.undo()                                                 # space again
    _tick_until(sched, lambda: status(sched.sessions, full).status == "completed", timeout=120)
    done = status(sched.sessions, full)
    assert done.output_file_id and sched.store.path(done.output_file_id).stat().st_size > 0
