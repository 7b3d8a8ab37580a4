"""Error-file lines as OpenAI writes them: a request's own failure (its prompt too long, its model unknown) is
the endpoint's 4xx answer in `response` (status_code, body.error) with `error` null; a failure with no answer
(the batch expired or was cancelled first) has `response` null and the reason in `error`."""
from __future__ import annotations

import json
import time

from sqlalchemy import select

from blendserve.core.config import Settings
from blendserve.core.db import make_engine, make_sessionmaker
from blendserve.core.models import Batch, File, Request
from blendserve.core.storage import FileStore
from blendserve.migrations.upgrade import upgrade
from blendserve.scheduler import lifecycle

FAILURES = [("context_length_exceeded", "The prompt (9000 tokens) plus max_tokens exceeds the context.", 400),
            ("model_not_found", "The model 'gone' is no longer served here.", 404),
            ("batch_expired", "This request could not be executed before the completion window expired.", None),
            ("batch_cancelled", "This request was not executed because the batch was cancelled.", None)]


def test_request_level_failures_are_written_as_responses(tmp_path):
    settings = Settings(data_dir=tmp_path)
    upgrade(settings.db_url)
    sessions, store = make_sessionmaker(make_engine(settings.db_url)), FileStore(settings.files_dir)
    now = int(time.time())
    with sessions.begin() as s:
        s.add(File(id="file-in", owner="o", filename="in.jsonl", purpose="batch", bytes=0, created_at=now))
        s.add(Batch(id="batch_x", owner="o", endpoint="/v1/chat/completions", model="m", input_file_id="file-in",
                    completion_window="24h", status="finalizing", created_at=now, expires_at=now + 60,
                    total=len(FAILURES) + 1))
        s.add(Request(batch_id="batch_x", line=0, custom_id="ok", model="m", body={}, status="completed",
                      response={"id": "chatcmpl-1", "object": "chat.completion", "choices": []}))
        for i, (code, message, _) in enumerate(FAILURES, start=1):
            s.add(Request(batch_id="batch_x", line=i, custom_id=code, model="m", body={}, status="failed",
                          error={"code": code, "message": message}))
    lifecycle.settle(sessions, store)
    with sessions() as s:
        b = s.scalar(select(Batch))
        assert b.status == "completed" and b.output_file_id and b.error_file_id
        lines = [json.loads(x) for x in store.path(b.error_file_id).read_bytes().splitlines()]
    by_id = {x["custom_id"]: x for x in lines}
    assert len(lines) == len(FAILURES)
    for code, message, status in FAILURES:
        line = by_id[code]
        assert set(line) == {"id", "custom_id", "response", "error"}
        if status is None:
            assert line["response"] is None and line["error"] == {"code": code, "message": message}
        else:
            assert line["error"] is None and line["response"]["status_code"] == status
            assert line["response"]["request_id"].startswith("req_")
            assert line["response"]["body"] == {"error": {"message": message, "type": "invalid_request_error",
                                                          "param": None, "code": code}}
