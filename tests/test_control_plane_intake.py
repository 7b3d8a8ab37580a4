"""Intake at scale (issue 14): a batch that grows `requests` a lot gets the table analyzed, so the
tokenizing update joins its ids by primary key instead of reading every queued row (the planner's
choice on a never-analyzed or freshly grown table: ~1,600 requests/s at a million rows)."""
from __future__ import annotations

from sqlalchemy import text

from scheduler import intake
from scheduler.service import Scheduler
from tests.conftest import TINY
from tests.live import chat_lines
from tests.reliability.inproc import add_batch, settings


def _reltuples(sched: Scheduler) -> float:
    with sched.sessions() as s:
        return s.scalar(text("SELECT reltuples FROM pg_class WHERE oid = to_regclass('requests')"))


def test_a_batch_that_grows_the_table_a_lot_gets_it_analyzed(tmp_path, backend, tiny_model):
    sched = Scheduler(settings(tmp_path, backend, tiny_model))
    assert sched.lead()
    add_batch(sched.sessions, sched.store, chat_lines(40, TINY), age=3)
    sched._validate_next()
    if backend == "sqlite":         # no planner statistics to refresh
        assert not intake.refresh_statistics(sched.sessions, 10**6)
        return
    assert _reltuples(sched) == 40              # never analyzed before (-1): now it is

    add_batch(sched.sessions, sched.store, chat_lines(3, TINY, prefix="b "), age=2)    # 3 <= 10% of 40
    sched._validate_next()
    assert _reltuples(sched) == 40

    add_batch(sched.sessions, sched.store, chat_lines(20, TINY, prefix="c "), age=1)   # 20 > 10% of 43
    sched._validate_next()
    assert _reltuples(sched) == 63
