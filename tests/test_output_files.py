"""Output files stay one JSON object per line whatever characters the model produced."""
from __future__ import annotations

import json
import time

from blendserve.core.config import Settings
from blendserve.core.db import make_engine, make_sessionmaker
from blendserve.core.models import Batch, File, Request
from blendserve.core.storage import FileStore
from blendserve.migrations.upgrade import upgrade
from blendserve.scheduler import lifecycle

NASTY = "a\u2028b\u2029c\x85d\x1ce\nf\u00e9"


def test_line_breaking_characters_are_escaped(tmp_path):
    settings = Settings(data_dir=tmp_path)
    upgrade(settings.db_url)
    sessions = make_sessionmaker(make_engine(settings.db_url))
    store = FileStore(settings.files_dir)
    now = int(time.time())
    body = {"choices": [{"message": {"content": NASTY}}]}
    with sessions.begin() as s:
        s.add(File(id="file-in", owner="", filename="in.jsonl", purpose="batch", bytes=0, created_at=now))
        s.add(Batch(id="batch_x", owner="", endpoint="/v1/chat/completions", model="m", input_file_id="file-in",
                    completion_window="24h", status="in_progress", created_at=now, in_progress_at=now,
                    expires_at=now + 3600, total=2))
        for line, cid in ((1, "ok"), (2, "ok2")):
            s.add(Request(batch_id="batch_x", line=line, custom_id=cid, model="m", body={}, prompt_ids=b"",
                          prompt_tokens=1, max_tokens=1, status="completed", response=body))
    lifecycle.settle(sessions, store)
    with sessions() as s:
        b = s.get(Batch, "batch_x")
        assert b.status == "completed"
    text = store.path(b.output_file_id).read_bytes().decode()
    lines = text.splitlines()
    assert len(lines) == 2 and text.isascii()
    assert json.loads(lines[0])["response"]["body"]["choices"][0]["message"]["content"] == NASTY
