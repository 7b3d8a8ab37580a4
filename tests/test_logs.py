"""BLENDSERVE_LOG_FORMAT=json: every line a role prints is one JSON object (what log shippers parse)."""
from __future__ import annotations

import json
import time

import httpx

from tests.conftest import SQLITE_ONLY, TINY
from tests.live import chat_lines, run_batch


@SQLITE_ONLY
def test_json_logs_from_every_role(make_deployment):
    d = make_deployment(BLENDSERVE_LOG_FORMAT="json")
    for role in ("api", "scheduler", "worker"):
        d.start(role)
    deadline = time.time() + 120            # /ready, not a log marker: the lines are JSON now
    while time.time() < deadline:
        try:
            if httpx.get(d.base_url.removesuffix("/v1") + "/ready").status_code == 200:
                break
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    c = d.client()
    assert run_batch(c, chat_lines(3, TINY, max_tokens=3)).status == "completed"
    d.stop()
    for role in ("api", "scheduler", "worker"):
        lines = [ln for ln in d.log(role, tail=None).splitlines() if ln.strip()]
        assert lines, role
        records = [json.loads(ln) for ln in lines]          # raises on any line that is not JSON
        assert all({"ts", "level", "logger", "message"} <= r.keys() for r in records)
    api = [json.loads(ln) for ln in d.log("api", tail=None).splitlines() if ln.strip()]
    assert any("api listening on" in r["message"] for r in api)
    assert any(r["logger"] == "uvicorn.access" for r in api)       # uvicorn's own loggers go through it too
