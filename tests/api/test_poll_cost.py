"""The status poll on a real uvicorn: repeats come from the cache without a database read or an access-log
line, under the caller's tenant only, with the front door's 401/404 answers, a status change within the
cache's bound and the process's own cancel at once."""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import event, update

from blendserve.api.status import StatusCache
from blendserve.core.models import Batch
from tests.api.conftest import in_process_api
from tests.conftest import TINY
from tests.live import chat_lines, jsonl

ALPHA, BETA = "sk-alpha-polls-1", "sk-beta-polls-1"


def _batch(http) -> dict:
    r = http.post("/files", files={"file": ("in.jsonl", jsonl(chat_lines(2, TINY)))}, data={"purpose": "batch"})
    assert r.status_code == 200, r.text
    r = http.post("/batches", json={"input_file_id": r.json()["id"], "endpoint": "/v1/chat/completions",
                                    "completion_window": "24h"})
    assert r.status_code == 200, r.text
    return r.json()


def _reads(api) -> list[str]:
    """Every statement the API's read-only engine runs from now on."""
    seen: list[str] = []
    event.listen(api.state.read_sessions.kw["bind"], "before_cursor_execute",
                 lambda conn, cursor, statement, *a: seen.append(statement))
    return seen


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextmanager
def access_log() -> Iterator[list[str]]:
    """uvicorn's access lines, at INFO (the server has configured its loggers by now)."""
    logger = logging.getLogger("uvicorn.access")
    level, handler = logger.level, Lines()
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_repeated_polls_read_nothing_and_log_nothing(tmp_path, tiny_model):
    with in_process_api(tmp_path, f"{TINY}={tiny_model}", api_keys=[f"alpha:{ALPHA}"], status_cache_s=60) as api, \
            access_log() as lines:
        http = api.http(headers={"Authorization": f"Bearer {ALPHA}"})
        b = _batch(http)
        reads = _reads(api)
        first = http.get(f"/batches/{b['id']}")
        assert first.status_code == 200 and first.json()["id"] == b["id"]
        assert reads, "the first poll reads the batch"
        after_first, logged = len(reads), len(lines)
        for _ in range(20):
            r = http.get(f"/batches/{b['id']}")
            assert r.status_code == 200 and r.content == first.content
            assert r.headers["content-type"] == "application/json"
        assert len(reads) == after_first, reads[after_first:]
        assert len(lines) == logged and any(f"/v1/batches/{b['id']}" in ln for ln in lines)
        assert http.get(f"/batches/{b['id']}?x=1").status_code == 200    # the full route: logged
        assert len(lines) == logged + 1


def test_cached_poll_is_scoped_and_refused_as_the_route_refuses(tmp_path, tiny_model):
    with in_process_api(tmp_path, f"{TINY}={tiny_model}", api_keys=[f"alpha:{ALPHA}", f"beta:{BETA}"],
                        status_cache_s=60) as api:
        alpha = api.http(headers={"Authorization": f"Bearer {ALPHA}"})
        b = _batch(alpha)
        path = f"/batches/{b['id']}"
        assert alpha.get(path).status_code == 200                      # now in the cache, under alpha
        beta = api.http(headers={"Authorization": f"Bearer {BETA}"}).get(path)
        assert beta.status_code == 404 and beta.json()["error"]["code"] == "not_found"
        bare = api.http().get(path)
        assert bare.status_code == 401 and bare.json()["error"]["code"] == "missing_api_key"
        assert bare.headers["www-authenticate"] == "Bearer"
        wrong = api.http(headers={"Authorization": "Bearer sk-nobody"}).get(path)
        assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
        other = api.http(headers={"Authorization": f"Bearer {BETA}"}).get("/batches/batch_nosuchbatch")
        assert other.status_code == 404 and other.json()["error"]["message"] == beta.json()["error"]["message"] \
            .replace(b["id"], "batch_nosuchbatch")


def test_status_change_within_the_bound_and_own_cancel_at_once(tmp_path, tiny_model):
    ttl = 0.3
    with in_process_api(tmp_path, f"{TINY}={tiny_model}", status_cache_s=ttl) as api:
        http = api.http()
        b = _batch(http)
        path = f"/batches/{b['id']}"
        assert http.get(path).json()["status"] == "validating"
        with api.state.sessions.begin() as s:                          # the scheduler's move, another process
            s.execute(update(Batch).where(Batch.id == b["id"]).values(status="in_progress"))
        time.sleep(ttl + 0.05)
        assert http.get(path).json()["status"] == "in_progress"
        for _ in range(5):
            http.get(path)                                             # cached again
        assert http.post(f"{path}/cancel").json()["status"] == "cancelling"
        assert http.get(path).json()["status"] == "cancelling"        # at once, though the entry was fresh


def test_polls_that_miss_together_share_one_read_and_a_drop_wins():
    cache = StatusCache(ttl=60)
    reads: list[int] = []

    async def read() -> bytes:
        reads.append(1)
        await asyncio.sleep(0.05)
        return b'{"status":"in_progress"}' if len(reads) == 1 else b'{"status":"cancelling"}'

    async def polls() -> list[bytes]:
        together = await asyncio.gather(*(cache.read_through("o", "batch_a", read) for _ in range(32)))
        assert len(reads) == 1 and set(together) == {b'{"status":"in_progress"}'}
        first = asyncio.ensure_future(cache.read_through("o", "batch_b", read))
        await asyncio.sleep(0.01)
        cache.drop("o", "batch_b")                     # a cancel commits while a read of batch_b is out
        after = await cache.read_through("o", "batch_b", read)
        await first
        return [after, cache.get("o", "batch_b")]

    assert asyncio.run(polls()) == [b'{"status":"cancelling"}'] * 2     # the older read was not stored
    assert len(reads) == 3
