"""The worker side of the control plane at cluster scale (docs/design.md §10): the results of a process's ranks
share transactions, each written once; a claim is one transaction with its rows; idle ranks of one
process share their empty claims; the live-worker list is read once per interval, not per claim;
the scheduler's tokenized rows are stored one group to a statement, each with its own ids."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from sqlalchemy import event, func, select

from blendserve.core.config import Settings
from blendserve.core.db import make_engine, make_sessionmaker
from blendserve.core.models import Batch, BatchCount, Chunk, File, Request, Worker
from blendserve.migrations.upgrade import upgrade
from blendserve.protocol.bodies import tokenize
from blendserve.scheduler import intake
from blendserve.scheduler.service import Scheduler
from blendserve.worker import claims, writes
from blendserve.worker.ranks import Claims, LiveBatches
from tests.conftest import TINY
from tests.live import chat_lines, pg_schema_url
from tests.reliability.inproc import add_batch, settings


@pytest.fixture
def db(tmp_path, backend):
    settings = Settings(data_dir=tmp_path, database_url="" if backend == "sqlite" else pg_schema_url())
    upgrade(settings.db_url)
    engine = make_engine(settings.db_url)
    yield engine, make_sessionmaker(engine)
    engine.dispose()


def _batch(sessions, n: int, chunks: int = 1, model: str = "m") -> list[int]:
    """A running batch of n planned requests in `chunks` pending chunks; their ids in line order."""
    now = time.time()
    with sessions.begin() as s:
        s.add(File(id="file-in", owner="o", filename="in.jsonl", purpose="batch", bytes=0, created_at=int(now)))
        s.add(Batch(id="batch_x", owner="o", endpoint="/v1/chat/completions", model=model, input_file_id="file-in",
                    completion_window="24h", status="in_progress", created_at=int(now), in_progress_at=int(now),
                    expires_at=int(now) + 3600, total=n))
        cs = [Chunk(model=model, seq=k, status="pending", attempts=0, size=n // chunks, created_at=now)
              for k in range(chunks)]
        s.add_all(cs)
        s.flush()
        for line in range(n):
            s.add(Request(batch_id="batch_x", line=line, custom_id=f"c{line}", model=model, body={}, prompt_ids=b"",
                          prompt_tokens=10, max_tokens=8, status="planned", chunk_id=cs[line % chunks].id,
                          position=n - line))        # plan order is the reverse of line order
    with sessions() as s:
        return list(s.scalars(select(Request.id).order_by(Request.line)))


def _batch_more(sessions, n: int) -> list[int]:
    """n more planned requests of batch_x (no chunk)."""
    with sessions.begin() as s:
        rows = [Request(batch_id="batch_x", line=1000 + k, custom_id=f"more{k}", model="m", body={}, prompt_ids=b"",
                        prompt_tokens=10, max_tokens=8, status="planned") for k in range(n)]
        s.add_all(rows)
        s.flush()
        return [r.id for r in rows]


def _worker(sessions, wid: str, model: str = "m") -> None:
    now = time.time()
    with sessions.begin() as s:
        s.add(Worker(id=wid, model=model, engine="echo", host="h", kv_capacity_tokens=1000, pid=1, started_at=now,
                     heartbeat_at=now))


def _row(rid: int, out: int = 5) -> dict:
    return {"b_id": rid, "b_status": "completed", "b_response": {"ok": rid}, "b_error": None, "b_out": out,
            "b_cached": 2}


def _count(engine, kind: str):
    """A list that grows by one per commit (kind 'commit') or per statement on `table` (kind a table name)."""
    seen: list[str] = []
    if kind == "commit":
        event.listen(engine, "commit", lambda conn: seen.append("commit"))
    else:
        event.listen(engine, "before_cursor_execute",
                     lambda conn, cur, stmt, params, ctx, many: seen.append(stmt) if f"FROM {kind}" in stmt else None)
    return seen


def test_results_of_several_ranks_share_a_transaction_and_each_is_written_once(db):
    engine, sessions = db
    ids = _batch(sessions, 40)
    failed = _batch_more(sessions, 1)[0]
    commits = _count(engine, "commit")
    w = writes.ResultWriter(sessions, linger_s=0.3)
    settled: list[int] = []
    for k, rid in enumerate(ids):
        w.put(f"worker_{k % 4}", _row(rid), lambda rid=rid: settled.append(rid))
    w.put("worker_9", _row(ids[0], out=99), lambda: settled.append(-1))   # a second result for the same request
    w.put("worker_0", {"b_id": failed, "b_status": "failed", "b_response": None, "b_out": 0, "b_cached": 0,
                       "b_error": {"code": "server_error", "message": "ünïcode \"quoted\""}}, lambda: None)
    w.drain("worker_0")
    for k in (1, 2, 3, 9):
        w.drain(f"worker_{k}")
    assert sorted(settled) == sorted(ids + [-1])          # every put is settled once, written or not
    # The first result after a quiet spell goes at once; the rest of the burst shares one transaction.
    assert len(commits) <= 2, f"{len(commits)} transactions for 41 results put within the linger"
    with sessions() as s:
        assert s.scalar(select(func.count()).where(Request.status == "completed")) == 40
        assert s.scalar(select(func.sum(Request.completion_tokens))) == 40 * 5    # the duplicate lost
        by_writer = dict(s.execute(select(BatchCount.writer, BatchCount.completed)).all())
        assert s.scalar(select(Request.response).where(Request.id == ids[3])) == {"ok": ids[3]}
        row = s.execute(select(Request.status, Request.response, Request.error).where(Request.id == failed)).one()
        assert tuple(row) == ("failed", None, {"code": "server_error", "message": "ünïcode \"quoted\""})
        assert s.scalar(select(Request.finished_at).where(Request.id == ids[3])) > 0
    assert by_writer == {"worker_0": 10, "worker_1": 10, "worker_2": 10, "worker_3": 10}


def test_model_text_with_nul_and_odd_characters_is_stored_exactly(db):
    """A model may emit NUL: PostgreSQL's json_to_recordset refuses \\u0000 in anything it parses, so the
    bodies travel as JSON text (the batch stalled at 27 of 40 on the tiny model, its writes given up)."""
    engine, sessions = db
    ids = _batch(sessions, 3)
    odd = "a\x00b \u2028\u0085 \"q\" \\ \\u0000 ünï \U0001f600"
    w = writes.ResultWriter(sessions, linger_s=0.0)
    for rid in ids:
        w.put("worker_a", {**_row(rid), "b_response": {"choices": [{"text": odd}], "n": rid}}, lambda: None)
    w.drain("worker_a")
    with sessions() as s:
        got = dict(s.execute(select(Request.id, Request.response).where(Request.id.in_(ids))).all())
        assert s.scalar(select(func.sum(BatchCount.completed))) == 3
    assert got == {rid: {"choices": [{"text": odd}], "n": rid} for rid in ids}


def test_a_result_the_database_refuses_fails_alone_and_its_neighbours_are_written(db):
    """A DataError is the same on every try and every re-run: the transaction is halved until the culprit
    stands alone, and only that request fails (before, its chunk went back to pending for good)."""
    engine, sessions = db
    if engine.dialect.name == "sqlite":
        pytest.skip("SQLite stores any integer: no value it refuses with a DataError")
    ids = _batch(sessions, 9)
    w = writes.ResultWriter(sessions, linger_s=0.3)
    settled: list[int] = []
    for rid in ids:
        row = _row(rid, out=2**31 if rid == ids[5] else 5)      # completion_tokens is an integer column
        w.put("worker_a", row, lambda rid=rid: settled.append(rid))
    w.drain("worker_a")
    assert sorted(settled) == sorted(ids)
    with sessions() as s:
        status = dict(s.execute(select(Request.id, Request.status).where(Request.id.in_(ids))).all())
        error = s.scalar(select(Request.error).where(Request.id == ids[5]))
        counted = s.execute(select(func.sum(BatchCount.completed), func.sum(BatchCount.failed))).one()
    assert status == {rid: "failed" if rid == ids[5] else "completed" for rid in ids}
    assert error["code"] == "server_error" and "could not be stored" in error["message"]
    assert tuple(counted) == (8, 1)


def test_a_result_for_a_request_that_already_has_one_is_not_written_again(db):
    engine, sessions = db
    ids = _batch(sessions, 4)
    w = writes.ResultWriter(sessions, linger_s=0.0)
    w.put("worker_a", _row(ids[0]), lambda: None)
    w.drain("worker_a")
    w.put("worker_b", _row(ids[0], out=77), lambda: None)      # a re-run chunk, or a lost lease
    w.drain("worker_b")
    with sessions() as s:
        assert s.scalar(select(Request.completion_tokens).where(Request.id == ids[0])) == 5
        assert s.scalar(select(func.sum(BatchCount.completed))) == 1


def test_drain_waits_for_the_write(db):
    engine, sessions = db
    ids = _batch(sessions, 2)
    w = writes.ResultWriter(sessions, linger_s=0.5)
    w.put("worker_a", _row(ids[0]), lambda: None)             # after a quiet spell: written at once
    w.drain("worker_a")
    t0 = time.monotonic()
    w.put("worker_a", _row(ids[1]), lambda: None)             # results flow: this one lingers
    w.drain("worker_a")
    assert time.monotonic() - t0 >= 0.4                      # it waited out the linger, then the write
    with sessions() as s:
        assert s.scalar(select(Request.status).where(Request.id == ids[1])) == "completed"
    w.drain("worker_nobody")                                  # nothing queued: returns at once


def test_a_claim_takes_the_chunk_and_reads_its_rows_in_plan_order(db):
    engine, sessions = db
    ids = _batch(sessions, 6)
    _worker(sessions, "worker_a")
    got = claims.claim(sessions, "worker_a", "m", 30)
    assert got is not None
    assert [r.id for r in got.rows] == ids[::-1]               # by position
    assert {r.endpoint for r in got.rows} == {"/v1/chat/completions"}
    with sessions() as s:
        c = s.get(Chunk, got.id)
        assert (c.status, c.worker_id, c.attempts) == ("claimed", "worker_a", 1)
        assert s.get(Batch, "batch_x").first_run_at is not None
    assert claims.claim(sessions, "worker_a", "m", 30) is None   # the only chunk is held


def test_a_heartbeat_renews_every_held_chunk_in_one_statement_and_release_decides_in_one(db):
    """renew answers the chunks still held (one taken over after its lease ran out is not); release makes a
    chunk `done` when none of its rows is left `planned`, else `pending`, each in one UPDATE."""
    engine, sessions = db
    ids = _batch(sessions, 6, chunks=3)
    _worker(sessions, "worker_a")
    got = [claims.claim(sessions, "worker_a", "m", 30) for _ in range(3)]
    with sessions.begin() as s:                  # the third's lease ran out and worker_b took it
        s.execute(Chunk.__table__.update().where(Chunk.id == got[2].id).values(worker_id="worker_b"))
    statements = _count(engine, "chunks")
    updates: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda conn, cur, stmt, *a: updates.append(stmt)
                 if stmt.startswith("UPDATE chunks") else None)
    assert claims.renew(sessions, [c.id for c in got], "worker_a", 30) == {got[0].id, got[1].id}
    assert len(updates) == 1 and not statements
    with sessions.begin() as s:                  # the first chunk's rows have their results
        s.execute(Request.__table__.update().where(Request.chunk_id == got[0].id).values(status="completed"))
    assert claims.release(sessions, got[0].id, "worker_a") == "done"
    assert claims.release(sessions, got[1].id, "worker_a", undo_claim=True) == "pending"
    assert claims.release(sessions, got[2].id, "worker_a") == ""          # not this worker's any more
    assert len(updates) == 4
    with sessions() as s:
        rows = {c.id: (c.status, c.worker_id, c.attempts) for c in s.scalars(select(Chunk))}
    assert rows[got[0].id] == ("done", "worker_a", 1) and rows[got[1].id] == ("pending", None, 0)
    assert rows[got[2].id] == ("claimed", "worker_b", 1) and len(ids) == 6


def test_the_live_worker_list_is_read_once_per_interval_and_again_for_a_newcomer(db):
    engine, sessions = db
    _batch(sessions, 8, chunks=4)
    _worker(sessions, "worker_a")
    reads = _count(engine, "workers")
    claims._RANKS.cached.clear()
    assert claims.claim(sessions, "worker_a", "m", 30) is not None
    assert claims.claim(sessions, "worker_a", "m", 30) is not None
    assert len(reads) == 1
    _worker(sessions, "worker_b")
    assert claims.claim(sessions, "worker_b", "m", 30) is not None   # not in the cached list: read again
    assert len(reads) == 2


def test_idle_ranks_of_a_process_share_an_empty_claim(db):
    engine, sessions = db
    _worker(sessions, "worker_a")
    reads = _count(engine, "chunks")
    gate = Claims()
    results = []
    threads = [threading.Thread(target=lambda: results.append(gate.claim(sessions, "worker_a", "m", 30, 5.0)))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [None] * 8
    assert len(reads) == 1, "eight idle ranks asked the database more than once within a poll interval"
    # Once the interval is over the next claim asks again, and finds the new work.
    gate.empty_at -= 5.0
    _batch(sessions, 4)
    got = gate.claim(sessions, "worker_a", "m", 30, 5.0)
    assert got is not None and len(got.rows) == 4
    assert gate.claim(sessions, "worker_a", "m", 30, 5.0) is None        # a success re-opens the gate: it asks
    assert len(reads) == 3


def test_the_shared_empty_claim_holds_longer_while_claims_stay_empty(db):
    from blendserve.worker.ranks import IDLE_BACKOFF

    engine, sessions = db
    _worker(sessions, "worker_a")
    reads = _count(engine, "chunks")
    gate, poll = Claims(), 5.0
    for n in range(1, 6):       # holds of 1, 2, 4, 4, 4 poll intervals (IDLE_BACKOFF = 4)
        assert gate.claim(sessions, "worker_a", "m", 30, poll) is None and gate.empty == n   # asked: empty again
        asked, hold = len(reads), min(2 ** (n - 1), IDLE_BACKOFF) * poll
        gate.empty_at = time.monotonic() - hold + 0.5
        assert gate.claim(sessions, "worker_a", "m", 30, poll) is None and len(reads) == asked   # held: no question
        gate.empty_at = time.monotonic() - hold - 0.5                                            # past it: asks
    assert len(reads) == 5
    _batch(sessions, 4)
    assert gate.claim(sessions, "worker_a", "m", 30, poll) is not None
    assert gate.empty == 0      # a success: the next empty claim holds one interval again


def test_tokenized_rows_get_the_token_ids_every_role_computes(tmp_path, backend, tiny_model):
    """The scheduler's group update (one statement per group on PostgreSQL) stores each row's own ids."""
    sched = Scheduler(settings(tmp_path, backend, tiny_model))
    assert sched.lead()
    rows = chat_lines(30, TINY, max_tokens=4, prefix="A shared instruction. ")
    bid = add_batch(sched.sessions, sched.store, rows)
    sched._validate_next()
    while intake.tokenize_queued(sched.sessions, sched.store, sched.models()):
        pass
    info = sched.models()[TINY]
    with sched.sessions() as s:
        got = s.execute(select(Request.line, Request.status, Request.prompt_ids, Request.prompt_tokens)
                        .where(Request.batch_id == bid).order_by(Request.line)).all()
    assert len(got) == 30 and {g.status for g in got} == {"pending"}
    want = tokenize("/v1/chat/completions", [r["body"] for r in rows], info)
    assert [np.frombuffer(g.prompt_ids, dtype="<i4").tolist() for g in got] == want
    assert [g.prompt_tokens for g in got] == [len(w) for w in want]


def test_a_batch_watched_while_another_rank_reads_the_live_set_is_not_missed(db):
    """Ranks share one live-batch read: a batch one rank starts watching while another's read is under
    way must not be taken for cancelled until the next read a second later."""
    engine, sessions = db
    _batch(sessions, 2)
    live = LiveBatches(sessions)
    live.watch({"batch_other"})
    calls = []

    def racing_sessions():          # the first read: another rank watches batch_x meanwhile
        if not calls:
            live.watch({"batch_x"})
        calls.append(1)
        return sessions()

    live.sessions = racing_sessions
    _ = "batch_other" in live       # the read that started before the watch
    assert "batch_x" in live        # read again at once, not a second later
    assert len(calls) == 2


def test_a_result_after_a_quiet_spell_is_written_at_once_and_a_flow_lingers(db):
    """A batch's first result is what its user waits on: it never waits for company that is not coming."""
    engine, sessions = db
    ids = _batch(sessions, 3)
    w = writes.ResultWriter(sessions, linger_s=2.0)
    t0 = time.monotonic()
    w.put("worker_a", _row(ids[0]), lambda: None)
    w.drain("worker_a")
    assert time.monotonic() - t0 < 1.0, "a lone result waited out the linger"
    commits = _count(engine, "commit")
    t0 = time.monotonic()
    w.put("worker_a", _row(ids[1]), lambda: None)     # right after a write: results are flowing, it lingers
    w.put("worker_a", _row(ids[2]), lambda: None)
    w.drain("worker_a")
    assert time.monotonic() - t0 >= 1.5 and len(commits) == 1
