"""A scheduler in this process against a real database (SQLite or a fresh PostgreSQL schema), and
rows made the way the API makes them: for tests that must reach one race or one failure exactly."""
from __future__ import annotations

import time
from pathlib import Path

from blendserve.core.config import Settings
from blendserve.core.ids import new_id
from blendserve.core.models import Batch, Chunk, File, Request
from blendserve.core.storage import FileStore
from tests.conftest import TINY
from tests.live import jsonl, pg_schema_url


def settings(tmp: Path, backend: str, tiny_model: Path, **kw) -> Settings:
    url = "" if backend == "sqlite" else pg_schema_url()
    return Settings(data_dir=tmp, database_url=url, models=f"{TINY}={tiny_model}", planner="fcfs",
                    lease_seconds=30, **kw)


def add_batch(sessions, store: FileStore, rows: list[dict] | bytes, status: str = "validating",
              endpoint: str = "/v1/chat/completions", age: int = 0) -> str:
    """A batch as the API creates it; `age` seconds old (batches are taken oldest first)."""
    fid, bid, now = new_id("file-"), new_id("batch_"), int(time.time()) - age
    data = rows if isinstance(rows, bytes) else jsonl(rows)
    with store.open_writer(fid) as w:
        w.write(data)
        size = w.commit()
    with sessions.begin() as s:
        s.add(File(id=fid, owner="", filename="in.jsonl", purpose="batch", bytes=size, created_at=now))
        s.add(Batch(id=bid, owner="", endpoint=endpoint, input_file_id=fid, completion_window="24h",
                    status=status, created_at=now, expires_at=now + 86400, total=0))
    return bid


def status(sessions, bid: str) -> Batch:
    with sessions() as s:
        return s.get(Batch, bid)


def running_batch(sessions, total: int) -> None:
    """Batch `batch_x` of model "m", in progress, for a worker test whose chunks are written by hand."""
    now = int(time.time())
    with sessions.begin() as s:
        s.add(File(id="file-in", owner="o", filename="in.jsonl", purpose="batch", bytes=0, created_at=now))
        s.add(Batch(id="batch_x", owner="o", endpoint="/v1/chat/completions", model="m", input_file_id="file-in",
                    completion_window="24h", status="in_progress", created_at=now, in_progress_at=now,
                    expires_at=now + 3600, total=total))


def planned_chunk(sessions, seq: int, size: int, max_tokens: int) -> int:
    """A pending chunk of `batch_x` with `size` planned requests (lines seq * size ...); its id."""
    with sessions.begin() as s:
        chunk = Chunk(model="m", seq=seq, status="pending", attempts=0, size=size, created_at=time.time())
        s.add(chunk)
        s.flush()
        s.add_all(Request(batch_id="batch_x", line=size * seq + k, custom_id=f"c{size * seq + k}", model="m",
                          body={}, prompt_ids=b"", prompt_tokens=0, max_tokens=max_tokens, status="planned",
                          chunk_id=chunk.id, position=k) for k in range(size))
        return chunk.id
