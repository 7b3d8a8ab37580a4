"""Several echo ranks in one worker process: the control plane's load-test set-up, end to end."""
from __future__ import annotations

from sqlalchemy import func, select

from blendserve.core.db import make_engine, make_sessionmaker
from blendserve.core.models import Chunk, Request, Worker
from tests.conftest import TINY
from tests.live import chat_lines, read_lines, run_batch


def test_four_echo_ranks_share_a_batch(make_deployment):
    d = make_deployment(BLENDSERVE_ECHO_TOKENS_PER_S="400", BLENDSERVE_CHUNK_REQUESTS="4")
    d.start("api")
    d.start("scheduler")
    d.start("worker", "worker", "--engine", "echo", "--ranks", "4")
    d.wait_ready()
    c = d.client()
    rows = chat_lines(64, TINY, max_tokens=40, prefix="The same long instruction for every line. " * 8)
    b = run_batch(c, rows)
    assert b.status == "completed" and b.request_counts.completed == 64
    out = read_lines(c, b.output_file_id)
    assert sorted(o["custom_id"] for o in out) == sorted(r["custom_id"] for r in rows)
    assert all(o["response"]["body"]["usage"]["completion_tokens"] == 40 for o in out)
    assert b.usage.input_tokens_details.cached_tokens > 0          # the prefix model hits
    url = d.env["BLENDSERVE_DATABASE_URL"] or f"sqlite:///{d.data_dir / 'blendserve.db'}"
    with make_sessionmaker(make_engine(url, readonly=True))() as s:
        assert s.scalar(select(func.count()).select_from(Worker).where(Worker.engine == "echo")) == 4
        used = s.scalar(select(func.count(func.distinct(Chunk.worker_id)))
                        .join(Request, Request.chunk_id == Chunk.id).where(Request.batch_id == b.id))
    assert used >= 2                                                 # the ranks really share the work
