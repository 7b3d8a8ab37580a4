"""The stored-bytes quota holds under concurrency: ten uploads of 4.4 MB whose heads all reach the API before
any body ends, against a 5 MB quota, store at most 5 MB between them, for file uploads and for Uploads API
parts alike; the refused ones leave no bytes held behind."""
from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from sqlalchemy import func, select

from blendserve.core.models import File
from blendserve.core.owners import PREFIX
from blendserve.core.uploads import StorageHold
from tests.api.conftest import in_process_api
from tests.conftest import TINY
from tests.live import pg_schema_url

QUOTA = 5_000_000
SIZE = 4_400_000
N = 10
BOUNDARY = "quota-race-boundary"


@pytest.fixture
def api(tmp_path, tiny_model, backend):
    url = "" if backend == "sqlite" else pg_schema_url()
    with in_process_api(tmp_path, f"{TINY}={tiny_model}", database_url=url, api_keys="a:ka,b:kb",
                        quota_stored_bytes=QUOTA) as running:
        yield running


def form(field: str, barrier: threading.Barrier, extra: dict[str, str]) -> tuple[Iterator[bytes], int]:
    """A multipart body sent as it is made, and its length: the fields and the file part's head, then a wait
    until every upload has sent as much, then the file's bytes in 64 KB pieces."""
    head = b"".join(f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
                    for name, value in extra.items())
    head += (f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{field}"; filename="in.jsonl"\r\n'
             "Content-Type: application/octet-stream\r\n\r\n").encode()
    tail = f"\r\n--{BOUNDARY}--\r\n".encode()

    def body() -> Iterator[bytes]:
        yield head
        barrier.wait(30)
        line = b'{"x": 1}\n' * (65536 // 9)
        sent = 0
        while sent < SIZE:
            piece = line[:SIZE - sent]
            sent += len(piece)
            yield piece
        yield tail
    return body(), len(head) + SIZE + len(tail)


def race(api, key: str, paths: list[str], field: str, extra: dict[str, str]) -> list[httpx.Response]:
    barrier = threading.Barrier(len(paths))
    headers = {"authorization": f"Bearer {key}", "content-type": f"multipart/form-data; boundary={BOUNDARY}"}

    def send(path: str) -> httpx.Response:
        content, length = form(field, barrier, extra)
        with api.http(timeout=120) as h:
            return h.post(path, content=content, headers={**headers, "content-length": str(length)})

    with ThreadPoolExecutor(len(paths)) as pool:
        return list(pool.map(send, paths))


def held(api, owner: str) -> tuple[int, int]:
    """(bytes of the tenant's files, bytes of its holds)."""
    with api.state.sessions() as s:
        files = s.scalar(select(func.coalesce(func.sum(File.bytes), 0)).where(File.owner == owner))
        holds = s.scalar(select(func.coalesce(func.sum(StorageHold.bytes), 0)).where(StorageHold.owner == owner))
        return int(files), int(holds)


def check_refusals(answers: list[httpx.Response]) -> int:
    ok = [r for r in answers if r.status_code == 200]
    for r in answers:
        assert r.status_code in (200, 429), r.text
        if r.status_code == 429:
            assert r.json()["error"]["code"] == "storage_quota_exceeded" and r.headers["retry-after"]
    return len(ok)


def test_concurrent_file_uploads_store_at_most_the_quota(api):
    answers = race(api, "ka", ["/files"] * N, "file", {"purpose": "batch"})
    assert check_refusals(answers) == 1          # one fits in 5 MB; two would not
    files, holds = held(api, PREFIX + "a")
    assert files == SIZE and holds == 0          # the refused uploads hold nothing
    with api.http(headers={"authorization": "Bearer ka"}) as h:
        small = h.post("/files", files={"file": ("s.jsonl", b"x" * (QUOTA - SIZE))}, data={"purpose": "batch"})
        assert small.status_code == 200, small.text      # exactly what is left still fits
        over = h.post("/files", files={"file": ("t.jsonl", b"x")}, data={"purpose": "batch"})
        assert over.status_code == 429


def test_concurrent_upload_parts_store_at_most_the_quota(api):
    with api.http(headers={"authorization": "Bearer kb"}) as h:
        ids = [h.post("/uploads", json={"filename": "in.jsonl", "purpose": "batch", "bytes": SIZE,
                                        "mime_type": "application/jsonl"}).json()["id"] for _ in range(N)]
    answers = race(api, "kb", [f"/uploads/{u}/parts" for u in ids], "data", {})
    assert check_refusals(answers) == 1
    files, holds = held(api, PREFIX + "b")
    assert files == 0 and holds == SIZE          # the part's bytes are held until its upload ends
    done = next(r.json() for r in answers if r.status_code == 200)
    with api.http(headers={"authorization": "Bearer kb"}) as h:
        up = h.post(f"/uploads/{done['upload_id']}/complete", json={"part_ids": [done["id"]]})
        assert up.status_code == 200 and up.json()["file"]["bytes"] == SIZE
    assert held(api, PREFIX + "b") == (SIZE, 0)
