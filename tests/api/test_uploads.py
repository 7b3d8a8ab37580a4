"""The Uploads API through a real server and the real openai package: the SDK's chunked upload becomes a
batch's input and runs, parts arrive in any order and in parallel, and every way to get it wrong is a 4xx
that leaves the upload as it was."""
from __future__ import annotations

import hashlib
import time
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
from sqlalchemy import func, select, update

from blendserve.core.models import File
from blendserve.core.uploads import StorageHold, Upload, UploadPart
from tests.api.conftest import in_process_api
from tests.conftest import SQLITE_ONLY, TINY
from tests.live import chat_lines, jsonl, pg_schema_url, wait_batch


@pytest.fixture
def api_at(tmp_path, tiny_model, backend):
    url = "" if backend == "sqlite" else pg_schema_url()

    def start(**settings):
        return in_process_api(tmp_path, f"{TINY}={tiny_model}", database_url=url, **settings)

    return start


def sdk(api, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=api.base_url, api_key=key, max_retries=0, timeout=30)


def stored_parts(api) -> list[str]:
    return sorted(p.name for p in api.state.store.root.iterdir() if p.name.startswith("part_"))


def test_chunked_upload_becomes_a_batch_that_runs(deployment):
    c = deployment.client()
    rows = chat_lines(9, TINY, max_tokens=4)
    data = jsonl(rows)
    up = c.uploads.upload_file_chunked(file=data, filename="in.jsonl", bytes=len(data), purpose="batch",
                                       mime_type="application/jsonl", part_size=256,
                                       md5=hashlib.md5(data).hexdigest())
    assert up.status == "completed" and up.object == "upload" and up.id.startswith("upload_")
    assert up.file.bytes == len(data) and up.file.purpose == "batch" and up.file.filename == "in.jsonl"
    assert up.file.expires_at and up.file.expires_at > up.file.created_at      # batch files expire, as uploads
    assert c.files.content(up.file.id).content == data
    b = c.batches.create(input_file_id=up.file.id, endpoint="/v1/chat/completions", completion_window="24h")
    b = wait_batch(c, b.id)
    assert b.status == "completed" and b.request_counts.completed == 9, b.errors


def test_parts_in_any_order_and_in_parallel(api_at, tmp_path):
    data = jsonl(chat_lines(40, TINY))
    cuts = [data[i:i + 700] for i in range(0, len(data), 700)]
    with api_at() as api:
        c = sdk(api, "k")
        up = c.uploads.create(bytes=len(data), filename="big.jsonl", mime_type="application/jsonl", purpose="batch")
        assert up.status == "pending" and up.expires_at - up.created_at == 3600 and up.file is None
        with ThreadPoolExecutor(len(cuts)) as pool:       # the last cut first, all at once
            parts = list(pool.map(lambda chunk: c.uploads.parts.create(upload_id=up.id, data=chunk), cuts[::-1]))
        parts = parts[::-1]
        assert all(p.object == "upload.part" and p.upload_id == up.id and p.id.startswith("part_") for p in parts)
        assert len(stored_parts(api)) == len(cuts)
        done = c.uploads.complete(upload_id=up.id, part_ids=[p.id for p in parts])
        assert done.status == "completed" and c.files.content(done.file.id).content == data
        assert stored_parts(api) == []                       # the parts' bytes are gone once they are one file
        with api.state.sessions() as s:
            f = s.get(File, done.file.id)
            assert f.lines == 40 and f.bytes == len(data)   # counted as a normal upload counts them
            assert s.scalar(select(func.count()).select_from(UploadPart)) == 0
        path = tmp_path / "from-disk.jsonl"
        path.write_bytes(data)
        again = c.uploads.upload_file_chunked(file=path, mime_type="application/jsonl", purpose="batch")
        assert again.file.filename == "from-disk.jsonl" and c.files.content(again.file.id).content == data


def test_wrong_md5_bytes_or_parts_are_400_and_the_upload_stays_pending(api_at):
    data = b'{"a": 1}\n' * 50
    with api_at() as api:
        c = sdk(api, "k")
        up = c.uploads.create(bytes=len(data), filename="x.jsonl", mime_type="application/jsonl", purpose="batch")
        a = c.uploads.parts.create(upload_id=up.id, data=data[:200])
        with pytest.raises(openai.BadRequestError, match="past the 450 bytes declared"):
            c.uploads.parts.create(upload_id=up.id, data=data[200:] + b"extra")
        with pytest.raises(openai.BadRequestError, match="empty"):
            c.uploads.parts.create(upload_id=up.id, data=b"")
        b = c.uploads.parts.create(upload_id=up.id, data=data[200:])
        with pytest.raises(openai.BadRequestError, match="md5"):
            c.uploads.complete(upload_id=up.id, part_ids=[a.id, b.id], md5="0" * 32)
        with pytest.raises(openai.BadRequestError, match="created for 450 bytes"):
            c.uploads.complete(upload_id=up.id, part_ids=[a.id])
        with pytest.raises(openai.BadRequestError, match="more than once"):
            c.uploads.complete(upload_id=up.id, part_ids=[a.id, a.id])
        with pytest.raises(openai.BadRequestError, match="not a part of"):
            c.uploads.complete(upload_id=up.id, part_ids=[a.id, "part_0000"])
        assert c.files.list().data == []                     # nothing stored by the refusals
        done = c.uploads.complete(upload_id=up.id, part_ids=[a.id, b.id], md5=hashlib.md5(data).hexdigest())
        assert done.status == "completed" and c.files.content(done.file.id).content == data
        with pytest.raises(openai.BadRequestError, match="is completed"):
            c.uploads.complete(upload_id=up.id, part_ids=[a.id, b.id])
        with pytest.raises(openai.BadRequestError, match="purpose"):
            c.uploads.create(bytes=1, filename="x", mime_type="text/plain", purpose="assistants")


def test_cancel_deletes_the_parts(api_at):
    with api_at() as api:
        c = sdk(api, "k")
        up = c.uploads.create(bytes=10, filename="x.jsonl", mime_type="application/jsonl", purpose="batch")
        p = c.uploads.parts.create(upload_id=up.id, data=b"12345")
        assert stored_parts(api) == [p.id]
        assert c.uploads.cancel(upload_id=up.id).status == "cancelled"
        assert stored_parts(api) == []
        with pytest.raises(openai.BadRequestError, match="cancelled"):
            c.uploads.parts.create(upload_id=up.id, data=b"67890")
        with pytest.raises(openai.BadRequestError, match="cancelled"):
            c.uploads.complete(upload_id=up.id, part_ids=[p.id])
        with pytest.raises(openai.BadRequestError):
            c.uploads.cancel(upload_id=up.id)


def test_another_tenants_upload_is_not_found(api_at):
    with api_at(api_keys="a:ka,b:kb") as api:
        a, b = sdk(api, "ka"), sdk(api, "kb")
        up = a.uploads.create(bytes=5, filename="x.jsonl", mime_type="application/jsonl", purpose="batch")
        p = a.uploads.parts.create(upload_id=up.id, data=b"12345")
        for call in (lambda: b.uploads.parts.create(upload_id=up.id, data=b"12345"),
                     lambda: b.uploads.complete(upload_id=up.id, part_ids=[p.id]),
                     lambda: b.uploads.cancel(upload_id=up.id)):
            with pytest.raises(openai.NotFoundError):
                call()
        assert a.uploads.complete(upload_id=up.id, part_ids=[p.id]).status == "completed"


def test_limits_and_expiry(api_at):
    with api_at(upload_max_bytes=1000, quota_stored_bytes=500) as api:
        c = sdk(api, "k")
        with pytest.raises(openai.APIStatusError) as e:
            c.uploads.create(bytes=1001, filename="x.jsonl", mime_type="application/jsonl", purpose="batch")
        assert e.value.status_code == 413
        with pytest.raises(openai.RateLimitError) as e:       # under the limit, over what the quota leaves
            c.uploads.create(bytes=501, filename="x.jsonl", mime_type="application/jsonl", purpose="batch")
        assert e.value.code == "storage_quota_exceeded"
        up = c.uploads.create(bytes=10, filename="x.jsonl", mime_type="application/jsonl", purpose="batch")
        p = c.uploads.parts.create(upload_id=up.id, data=b"12345")
        with api.state.sessions.begin() as s:            # the part's bytes count against the quota until it ends
            assert s.get(StorageHold, p.id).bytes == 5
            s.execute(update(Upload).where(Upload.id == up.id).values(expires_at=1))
        with pytest.raises(openai.BadRequestError, match="expired"):
            c.uploads.parts.create(upload_id=up.id, data=b"67890")
    with api_at() as api:                # an API ends expired uploads as it starts, then once a minute
        deadline = time.time() + 20
        while stored_parts(api) and time.time() < deadline:
            time.sleep(0.1)
        assert stored_parts(api) == []
        with api.state.sessions() as s:
            assert s.get(Upload, up.id).status == "expired" and s.get(StorageHold, p.id) is None


def peak_rss_mb(pid: int) -> int:
    """The process's peak resident set (VmHWM) so far, in MB."""
    line = next(x for x in open(f"/proc/{pid}/status") if x.startswith("VmHWM:"))
    return int(line.split()[1]) // 1024


@SQLITE_ONLY
def test_memory_stays_flat_on_a_large_upload(make_deployment, tmp_path):
    """256 MB in the SDK's 64 MB parts, with its md5: the API process's peak RSS grows by less than half a
    part (a part or the file held in memory anywhere on the way would show as 64 MB or 256 MB)."""
    d = make_deployment()
    d.start("api")
    d.wait_ready()
    c = d.client()
    c.files.list()
    src, digest = tmp_path / "big.jsonl", hashlib.md5()
    with open(src, "wb") as f:
        block = (b'{"custom_id": "r", "body": {}}\n' * 40000)[: 1 << 20]
        for _ in range(256):
            f.write(block)
            digest.update(block)
    before = peak_rss_mb(d.procs["api"].pid)
    up = c.uploads.upload_file_chunked(file=src, mime_type="application/jsonl", purpose="batch",
                                       md5=digest.hexdigest())
    assert up.status == "completed" and up.file.bytes == 256 << 20
    assert peak_rss_mb(d.procs["api"].pid) - before < 32
