"""Intake at scale (docs/design.md §10): a batch that grows `requests` a lot gets the table analyzed, so the
tokenizing update joins its ids by primary key instead of reading every queued row (the planner's
choice on a never-analyzed or freshly grown table: ~1,600 requests/s at a million rows)."""
from __future__ import annotations

from sqlalchemy import select, text, update

from blendserve.core.models import Batch, Request
from blendserve.scheduler import intake
from blendserve.scheduler.service import Scheduler
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


def _statuses(sched: Scheduler, bid: str) -> list[str]:
    with sched.sessions() as s:
        return list(s.scalars(select(Request.status).where(Request.batch_id == bid).order_by(Request.line)))


def test_tokenizing_resumes_after_its_last_line_and_a_new_leader_finds_the_rest(tmp_path, backend, tiny_model,
                                                                               monkeypatch):
    """Groups go on from the last line tokenized; a cancelled batch and one with nothing queued left are
    passed over; an empty Progress (another scheduler taking over) still finds every queued row."""
    monkeypatch.setattr(intake, "TOKENIZE_GROUP", 4)
    sched = Scheduler(settings(tmp_path, backend, tiny_model))
    assert sched.lead()
    first = add_batch(sched.sessions, sched.store, chat_lines(10, TINY), age=3)
    second = add_batch(sched.sessions, sched.store, chat_lines(6, TINY, prefix="b "), age=2)
    sched._validate_next()
    sched._validate_next()
    progress = intake.Progress()

    assert intake.tokenize_queued(sched.sessions, sched.store, sched.models(), budget_s=0, progress=progress) == 4
    assert progress.after == {first: 4} and _statuses(sched, first) == ["pending"] * 4 + ["queued"] * 6

    # Another scheduler leads for a while and tokenizes a group of its own, from the start.
    assert intake.tokenize_queued(sched.sessions, sched.store, sched.models(), budget_s=0) == 4
    assert _statuses(sched, first) == ["pending"] * 8 + ["queued"] * 2

    # Back with the first one: its cursor is behind, and it finds the 2 rows left, then the second batch.
    assert intake.tokenize_queued(sched.sessions, sched.store, sched.models(), budget_s=0, progress=progress) == 2
    assert intake.tokenize_queued(sched.sessions, sched.store, sched.models(), budget_s=0, progress=progress) == 4
    assert progress.finished == {first} and progress.after == {first: 10, second: 4}

    with sched.sessions.begin() as s:      # cancelled: its last queued rows are never tokenized
        s.execute(update(Batch).where(Batch.id == second).values(status="cancelling"))
    assert intake.tokenize_queued(sched.sessions, sched.store, sched.models(), progress=progress) == 0
    assert progress.after == {first: 10} and progress.finished == {first}   # the cancelled one forgotten
    assert _statuses(sched, second) == ["pending"] * 4 + ["queued"] * 2
    assert _statuses(sched, first) == ["pending"] * 10
