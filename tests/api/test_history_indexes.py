"""Old batches stay out of the planner's hot path: its queries search indexes that finished work never enters."""
from __future__ import annotations

from sqlalchemy import func, select

from blendserve.core.config import Settings
from blendserve.core.db import make_engine
from blendserve.core.models import Batch, Chunk, Request
from blendserve.migrations.upgrade import upgrade

# The shapes of blendserve/scheduler/planning.py's per-round queries.
QUERIES = {
    "due models": select(Request.model, func.count(), func.min(Batch.in_progress_at)).join(Batch)
    .where(Request.status == "pending", Batch.status == "in_progress").group_by(Request.model),
    "models with pending chunks": select(Chunk.model).where(Chunk.status == "pending").distinct(),
    "unclaimed chunks": select(Chunk.id).where(Chunk.model == "m", Chunk.status == "pending"),
    "pending work": select(Request.id).join(Batch)
    .where(Request.model == "m", Batch.status == "in_progress",
           (Request.status == "pending") | ((Request.status == "planned") & Request.chunk_id.in_([1, 2]))),
    "next seq": select(func.max(Chunk.seq)),
    "history": select(Request.prompt_ids, Request.completion_tokens, Request.max_tokens)
    .where(Request.chunk_id.in_(select(Chunk.id).where(Chunk.model == "m", Chunk.status == "done")
                                .order_by(Chunk.id.desc()).limit(4096)), Request.status == "completed").limit(4096),
    "backlog": select(Chunk.id, Chunk.size, Chunk.seq).where(Chunk.model == "m", Chunk.status == "pending"),
    "new work count": select(func.count()).select_from(
        select(Request.id).where(Request.model == "m", Request.status == "pending").limit(5).subquery()),
    "new chunks": select(Chunk.seq, Chunk.id).where(Chunk.seq >= 5),
}


def test_planner_queries_never_scan_history(tmp_path):
    settings = Settings(data_dir=tmp_path)
    upgrade(settings.db_url)
    engine = make_engine(settings.db_url, readonly=True)
    with engine.connect() as c:
        for name, q in QUERIES.items():
            sql = str(q.compile(engine, compile_kwargs={"literal_binds": True}))
            plan = " | ".join(r[-1] for r in c.exec_driver_sql("EXPLAIN QUERY PLAN " + sql))
            assert "SCAN" not in plan.replace("SCAN anon_1", ""), (name, plan)   # anon_1: a LIMITed subquery
