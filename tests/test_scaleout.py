"""Several workers on one database: chunks are claimed once, a killed worker's chunk is re-run elsewhere."""
from __future__ import annotations

import time

import sqlalchemy as sa

from tests.conftest import TINY
from tests.live import chat_lines, jsonl, read_lines, run_batch, wait_batch


def test_three_workers_one_killed(make_deployment, backend):
    # Four running sequences a worker: it holds two chunks at a time, so one worker cannot pull the
    # whole plan into its engine before the others' next claim (idle ranks back off between claims).
    d = make_deployment(BLENDSERVE_CHUNK_REQUESTS="3", BLENDSERVE_PLANNER="blendserve", BLENDSERVE_CPU_MAX_BATCH="4")
    d.start("api")
    d.start("scheduler")
    for i in range(3):
        d.start("worker", f"worker{i}")
    d.wait_ready()
    c = d.client()
    rows = chat_lines(45, TINY, max_tokens=400)
    f = c.files.create(file=("w.jsonl", jsonl(rows)), purpose="batch")
    b = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    wait_batch(c, b.id, until=lambda x: x.request_counts.completed >= 3)
    d.kill("worker1")
    b = wait_batch(c, b.id)
    assert b.status == "completed"
    out = read_lines(c, b.output_file_id)
    assert sorted(o["custom_id"] for o in out) == sorted(r["custom_id"] for r in rows)
    # Every surviving worker ran chunks, and each chunk ended done exactly once.
    logs = [d.log(f"worker{i}", tail=None) for i in (0, 2)]
    assert all("stream:" in log for log in logs)
    url = d.env["BLENDSERVE_DATABASE_URL"] or f"sqlite:///{d.data_dir / 'blendserve.db'}"
    eng = sa.create_engine(url)
    with eng.connect() as conn:
        statuses = conn.execute(sa.text("SELECT status, count(*) FROM chunks GROUP BY status")).all()
        workers = conn.execute(sa.text("SELECT count(DISTINCT worker_id) FROM chunks")).scalar()
    eng.dispose()
    assert dict(statuses).keys() == {"done"} and workers >= 2


def test_standby_scheduler_takes_over(make_deployment, backend):
    d = make_deployment()
    d.start("api")
    d.start("scheduler", "sched_a")
    d.start("worker")
    d.wait_ready()
    c = d.client()
    assert run_batch(c, chat_lines(4, TINY)).status == "completed"
    d.start("scheduler", "sched_b")
    d.wait_ready()
    deadline = time.time() + 30
    while "standing by" not in d.log("sched_b", tail=None) and time.time() < deadline:
        time.sleep(0.2)
    assert " leads" in d.log("sched_a", tail=None) and "standing by" in d.log("sched_b", tail=None)
    d.kill("sched_a")                   # a crash: the lease lapses (3 s in tests) and sched_b takes over
    b = run_batch(c, chat_lines(4, TINY, prefix="after "))
    assert b.status == "completed" and b.request_counts.completed == 4
    assert " leads" in d.log("sched_b", tail=None)
