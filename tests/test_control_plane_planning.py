"""Incremental planning of large backlogs (docs/design.md §4.1): past BLENDSERVE_PLAN_WINDOW a round keeps the
planned backlog as it is and plans only new work, a window at a time, after it; high-priority work
of such a round goes ahead of the backlog. Every request ends up planned exactly once."""
from __future__ import annotations

from sqlalchemy import event, func, select, update

from blendserve.core.models import Batch, Chunk, Request
from blendserve.scheduler import intake, planning
from blendserve.scheduler.service import Scheduler
from tests.conftest import TINY
from tests.live import chat_lines
from tests.reliability.inproc import add_batch, settings


def _admit(sched: Scheduler, bid: str) -> None:
    """Validate and tokenize the batch (no planning yet)."""
    sched._validate_next()
    while intake.tokenize_queued(sched.sessions, sched.store, sched.models()):
        pass
    with sched.sessions() as s:
        assert s.get(Batch, bid).status == "in_progress"


def _round(sched: Scheduler) -> int:
    return planning.plan_round(sched.sessions, sched.settings, sched.policy, readers=sched.readers)


def test_rounds_past_the_window_plan_new_work_only_and_keep_the_backlog(tmp_path, backend, tiny_model):
    sched = Scheduler(settings(tmp_path, backend, tiny_model, chunk_requests=4, plan_max_requests=1,
                               plan_max_wait_s=0.0, plan_window=16))
    assert sched.lead()
    first = add_batch(sched.sessions, sched.store, chat_lines(40, TINY), age=3)
    _admit(sched, first)

    assert _round(sched) == 16                       # a window of the 40, not all of them
    with sched.sessions() as s:
        backlog = dict(s.execute(select(Chunk.id, Chunk.seq)).all())
        assert len(backlog) == 4
        assert s.scalar(select(func.count()).where(Request.status == "pending")) == 24
        # file order within the window
        lines = s.scalars(select(Request.line).join(Chunk, Chunk.id == Request.chunk_id)
                          .order_by(Chunk.seq, Request.position)).all()
        every = sorted(s.scalars(select(Request.line)))
        assert lines == every[:16]

    assert _round(sched) == 16 and _round(sched) == 8     # the rest, a window at a time
    with sched.sessions() as s:
        kept = dict(s.execute(select(Chunk.id, Chunk.seq).where(Chunk.id.in_(backlog))).all())
        assert kept == backlog, "an incremental round must leave the planned backlog alone"
        assert s.scalar(select(func.count()).where(Request.status == "pending")) == 0
        order = s.scalars(select(Request.line).join(Chunk, Chunk.id == Request.chunk_id)
                          .order_by(Chunk.seq, Request.position)).all()
        assert len(order) == len(set(order)) == 40 and order == sorted(order)

    # A high-priority batch arriving behind the backlog goes ahead of it, in one incremental round.
    high = add_batch(sched.sessions, sched.store, chat_lines(8, TINY, prefix="hi "), age=1)
    with sched.sessions.begin() as s:
        s.execute(update(Batch).where(Batch.id == high).values(metadata_={"priority": "high"}))
    _admit(sched, high)
    assert _round(sched) == 8
    with sched.sessions() as s:
        firsts = s.scalars(select(Request.batch_id).join(Chunk, Chunk.id == Request.chunk_id)
                           .order_by(Chunk.seq, Request.position).limit(8)).all()
        assert firsts == [high] * 8
        assert s.scalar(select(func.count(func.distinct(Chunk.seq)))) == s.scalar(select(func.count(Chunk.id)))
        assert s.scalar(select(func.count()).where(Request.status == "planned")) == 48


def test_a_small_backlog_is_still_replanned_whole(tmp_path, backend, tiny_model):
    """Under the window a round dissolves the pending chunks and re-plans their requests with the new."""
    sched = Scheduler(settings(tmp_path, backend, tiny_model, chunk_requests=4, plan_max_requests=1,
                               plan_max_wait_s=0.0, plan_window=64))
    assert sched.lead()
    first = add_batch(sched.sessions, sched.store, chat_lines(8, TINY), age=3)
    _admit(sched, first)
    assert _round(sched) == 8
    with sched.sessions() as s:
        old = set(s.scalars(select(Chunk.created_at)))
    second = add_batch(sched.sessions, sched.store, chat_lines(8, TINY, prefix="more "), age=1)
    _admit(sched, second)
    assert _round(sched) == 16
    with sched.sessions() as s:
        made = set(s.scalars(select(Chunk.created_at)))
        assert len(made) == 1 and not old & made, "the old pending chunks were dissolved and re-planned"
        assert s.scalar(select(func.count()).where(Request.status == "planned")) == 16


def test_a_round_moves_its_requests_in_one_statement_on_postgresql(tmp_path, backend, tiny_model):
    """The round's request updates go as arrays in one statement on PostgreSQL (a pipeline of one UPDATE
    per row was ~0.8 s a round of 8,000), and a replan still puts every request in exactly one chunk."""
    sched = Scheduler(settings(tmp_path, backend, tiny_model, chunk_requests=4, plan_max_requests=1,
                               plan_max_wait_s=0.0, plan_window=64))
    assert sched.lead()
    _admit(sched, add_batch(sched.sessions, sched.store, chat_lines(8, TINY), age=3))
    assert _round(sched) == 8
    _admit(sched, add_batch(sched.sessions, sched.store, chat_lines(6, TINY, prefix="more "), age=1))
    updates: list[tuple[str, bool]] = []
    engine = sched.sessions.kw["bind"]
    listen = lambda conn, cur, stmt, params, ctx, many: updates.append((stmt, many)) \
        if stmt.lstrip().startswith("UPDATE requests") else None  # noqa: E731
    event.listen(engine, "before_cursor_execute", listen)
    try:
        assert _round(sched) == 14
    finally:
        event.remove(engine, "before_cursor_execute", listen)
    if backend == "postgresql":
        assert len(updates) == 1 and "unnest" in updates[0][0] and not updates[0][1]
    with sched.sessions() as s:
        assert s.scalar(select(func.count()).where(Request.status == "planned")) == 14
        placed = s.execute(select(Request.chunk_id, Request.position)).all()
        assert len(set(placed)) == 14 and all(c is not None for c, _ in placed)
