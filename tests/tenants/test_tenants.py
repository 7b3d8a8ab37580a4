"""Tenants through the real API and the OpenAI SDK: keys of one tenant share its objects, rotation and a move
under a tenant orphan nothing, quotas answer 429 with Retry-After, and the input of an unfinished batch stays."""
from __future__ import annotations

import socket

import httpx
import openai
import pytest
from sqlalchemy import update

from blendserve.core.models import Batch
from tests.api.conftest import in_process_api
from tests.conftest import TINY
from tests.live import chat_lines, jsonl, pg_schema_url


@pytest.fixture
def api_at(tmp_path, tiny_model, backend):
    """Start the API (in this process, on a real port) over one data dir and database, with given settings."""
    url = "" if backend == "sqlite" else pg_schema_url()

    def start(**settings):
        return in_process_api(tmp_path, f"{TINY}={tiny_model}", database_url=url, **settings)

    return start


def sdk(api, key: str, retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(base_url=api.base_url, api_key=key, max_retries=retries, timeout=30)


def upload(c: openai.OpenAI, n: int = 2) -> str:
    return c.files.create(file=("in.jsonl", jsonl(chat_lines(n, TINY))), purpose="batch").id


def create(c: openai.OpenAI, file_id: str) -> str:
    return c.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h").id


def test_rotation_and_a_key_moved_under_a_tenant_orphan_nothing(api_at):
    with api_at(api_keys="sk-old,sk-stranger") as api:           # plain keys: each its own tenant
        old = sdk(api, "sk-old")
        f, b = upload(old), None
        b = create(old, f)
        assert sdk(api, "sk-stranger").files.list().data == []
    with api_at(api_keys="acme:sk-old,acme:sk-new,sk-stranger") as api:   # the key moves under a tenant
        new = sdk(api, "sk-new")
        assert new.files.retrieve(f).id == f and new.batches.retrieve(b).id == b
        assert [x.id for x in new.files.list()] == [f]
        f2 = upload(new)
        assert sdk(api, "sk-old").files.retrieve(f2).id == f2        # one tenant, two keys
        with pytest.raises(openai.NotFoundError):
            sdk(api, "sk-stranger").files.retrieve(f2)
    with api_at(api_keys="acme:sk-new") as api:                   # the old key removed: nothing lost
        new = sdk(api, "sk-new")
        assert {x.id for x in new.files.list()} == {f, f2} and new.batches.retrieve(b).status == "validating"
        with pytest.raises(openai.AuthenticationError):
            sdk(api, "sk-old").files.list()


def test_quotas_answer_429_with_retry_after(api_at):
    with api_at(api_keys="a:ka,b:kb", quota_stored_files=3, quota_stored_bytes=4000,
                quota_queued_requests=5) as api:
        a, b = sdk(api, "ka"), sdk(api, "kb")
        f3 = upload(a, 3)
        create(a, f3)                                          # 3 queued
        with pytest.raises(openai.RateLimitError) as e:        # 3 + 3 > 5: refused at create, nothing half-run
            create(a, upload(a, 3))
        err = e.value.response
        assert err.status_code == 429 and err.headers["retry-after"] == "60"
        assert e.value.body["code"] == "queue_quota_exceeded" and e.value.body["type"] == "requests"
        assert set(err.json()["error"]) == {"message", "type", "param", "code"}
        assert len(a.batches.list().data) == 1
        create(b, upload(b, 3))                                # another tenant's queue is its own
        with pytest.raises(openai.BadRequestError, match="split the file"):
            create(b, upload(b, 6))                            # never fits: a 400, not a 429 to retry
        # Files: a holds 2 of 3; the third fits, the fourth is a 429 before its body is read.
        third = upload(a, 1)
        with pytest.raises(openai.RateLimitError) as e:
            upload(a, 1)
        assert e.value.body["code"] == "file_quota_exceeded" and int(e.value.response.headers["retry-after"]) >= 60
        # Bytes: refused as the stream passes what is left, and nothing of it stored.
        big = sdk(api, "kb")
        with pytest.raises(openai.RateLimitError) as e:
            big.files.create(file=("big.jsonl", b"x" * 5000), purpose="batch")
        assert e.value.body["code"] == "storage_quota_exceeded"
        assert len(big.files.list().data) == 2
        # Cancelling frees the queue: the batch that did not fit now does.
        a.batches.cancel(a.batches.list().data[0].id)
        a.files.delete(third)
        create(a, upload(a, 3))


def test_input_file_of_an_unfinished_batch_is_kept(api_at):
    with api_at(api_keys="ka") as api:
        a = sdk(api, "ka", retries=2)
        f = upload(a)
        b = create(a, f)
        for status in ("validating", "in_progress", "finalizing", "cancelling"):
            with api.state.sessions.begin() as s:
                s.execute(update(Batch).where(Batch.id == b).values(status=status))
            with pytest.raises(openai.BadRequestError, match=f"which is {status}") as e:
                a.files.delete(f)
            assert e.value.code == "file_in_use"
            assert a.files.retrieve(f).id == f and a.files.content(f).text
        with api.state.sessions.begin() as s:
            s.execute(update(Batch).where(Batch.id == b).values(status="completed"))
        assert a.files.delete(f).deleted


def test_a_cursor_at_a_deleted_file_still_pages(api_at):
    """The SDK's auto-pagination asks for the next page after the last id of this one: a script deleting files
    as it lists them must reach every file."""
    with api_at(api_keys="ka,kb") as api:
        a = sdk(api, "ka")
        made = {upload(a) for _ in range(7)}
        seen = set()
        for f in a.files.list(limit=2):
            seen.add(f.id)
            a.files.delete(f.id)
        assert seen == made and a.files.list().data == []
        with pytest.raises(openai.NotFoundError):               # another tenant's deleted id is still not found
            sdk(api, "kb").files.list(after=sorted(made)[0])


def test_form_and_path_values_that_broke_the_api(api_at):
    with api_at(api_keys="ka") as api:
        h = {"Authorization": "Bearer ka"}
        for digits in ("\u00b2", "\u0663\u0666\u0660\u0660", "\uff13\uff16\uff10\uff10"):
            r = httpx.post(f"{api.base_url}/files", headers=h, files={"file": ("a.jsonl", b"{}\n")},
                           data={"purpose": "batch", "expires_after[anchor]": "created_at",
                                 "expires_after[seconds]": digits})
            assert r.status_code == 400 and r.json()["error"]["param"] == "expires_after.seconds"
        root = api.base_url.removesuffix("/v1")
        r = httpx.get(f"{root}/dashboard/batches/batch_%00x", headers=h)
        assert r.status_code == 404
        with socket.create_connection(("127.0.0.1", api.port)) as raw:     # clients refuse to send this one
            raw.sendall("POST /v1/files HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ka\r\n"
                        "Content-Length: \u00b2\r\n\r\n".encode())
            assert raw.recv(4096).split(b" ", 2)[1] == b"400"


def test_key_priorities_follow_the_tenant():
    """BLENDSERVE_KEY_PRIORITIES names a key (whose tenant's batches get the class) or a tenant by name."""
    from blendserve.core.config import Settings
    from blendserve.core.owners import owner_of_key
    from blendserve.scheduler import priority

    keys = "acme:sk-a1,acme:sk-a2,sk-solo"
    classes = priority.key_classes(Settings(api_keys=keys, key_priorities="sk-a1=high,sk-solo=low,beta=low")
                                   .key_priorities)
    assert classes["tenant:acme"] == priority.CLASS["high"]
    assert classes[owner_of_key("sk-solo")] == priority.CLASS["low"] and classes["tenant:beta"] == priority.CLASS["low"]
    with pytest.raises(ValueError) as e:                 # a bad entry is named by its place, not its key
        Settings(api_keys=keys, key_priorities="sk-a1=high,sk-secret-7=urgent")
    assert "entry 2" in str(e.value) and "sk-secret-7" not in str(e.value)


def test_queued_tokens_per_model(api_at):
    """OpenAI's enqueued token limit: a batch is refused while the tenant's queued prompt tokens for its model
    have reached the quota; another model's queue, and another tenant's, are their own."""
    from sqlalchemy import update as sql_update

    from blendserve.core.models import Request

    with api_at(api_keys="a:ka,b:kb", quota_queued_tokens=100) as api:
        a = sdk(api, "ka")
        first = create(a, upload(a))
        with api.state.sessions.begin() as s:      # what the scheduler writes once it has read the lines
            s.add_all([Request(batch_id=first, line=i, custom_id=f"r{i}", model=TINY, body={}, status="pending",
                               prompt_tokens=40, input_length=200) for i in range(3)])
        with pytest.raises(openai.RateLimitError) as e:
            create(a, upload(a))
        assert e.value.body["code"] == "token_limit_exceeded" and e.value.response.headers["retry-after"] == "60"
        other = a.files.create(file=("o.jsonl", jsonl(chat_lines(1, "other-model"))), purpose="batch")
        create(a, other.id)
        create(sdk(api, "kb"), upload(sdk(api, "kb")))
        with api.state.sessions.begin() as s:
            s.execute(sql_update(Request).where(Request.batch_id == first, Request.line < 2).values(status="completed"))
        create(a, upload(a))                        # 40 tokens left in the queue: below the quota
