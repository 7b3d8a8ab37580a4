"""An interactive call's tenant reaches the engine, whose scheduler lets tenants take turns at interactive
prefill (tests/engine/test_urgent_fairness.py): the API names the caller's tenant to the worker (a header
carrying a digest of the tenant, never its name or key), the worker puts it on the engine request. The API is
the real process; the worker row points at a recorder that answers as a worker would, so what the API sends
can be read; the worker side is the real interactive server and lane."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
from sqlalchemy import create_engine

from blendserve.core.config import TENANT_HEADER
from blendserve.core.db import make_sessionmaker
from blendserve.core.models import Worker
from blendserve.core.modelstore import load_tokenizer
from blendserve.protocol.bodies import model_info
from blendserve.worker.engines.base import GenResult
from blendserve.worker.interactive import InteractiveServer
from blendserve.worker.lane import Lane
from tests.conftest import SQLITE_ONLY, TINY

HI = [{"role": "user", "content": "hi"}]
ANSWER = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": TINY,
          "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                       "message": {"role": "assistant", "content": "hello", "refusal": None}}],
          "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


def recorder() -> tuple[ThreadingHTTPServer, list[str]]:
    """An HTTP server that answers every chat as a worker would and keeps the tenant header of each call."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            seen.append(self.headers.get(TENANT_HEADER, "<none>"))
            body = json.dumps(ANSWER).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


@SQLITE_ONLY
def test_the_api_names_each_callers_tenant_to_the_worker(make_deployment) -> None:
    d = make_deployment(BLENDSERVE_API_KEYS="alice:ka1,alice:ka2,bob:kb1")
    d.start("api")
    d.wait_ready()
    server, seen = recorder()
    db = create_engine(f"sqlite:///{(d.data_dir / 'blendserve.db').resolve()}")
    now = time.time()
    with make_sessionmaker(db)() as s, s.begin():
        s.add(Worker(id="w-rec", model=TINY, engine="cpu", kv_capacity_tokens=4096, step_tokens=512,
                     interactive_url=f"http://127.0.0.1:{server.server_address[1]}", host="127.0.0.1", pid=1,
                     started_at=now, heartbeat_at=now + 600))
    try:
        for key in ("ka1", "ka2", "kb1"):
            r = d.client(key).chat.completions.create(model=TINY, messages=HI, max_tokens=1)
            assert r.choices[0].message.content == "hello"
    finally:
        server.shutdown()
    alice, alice_again, bob = seen
    assert alice == alice_again, "two keys of one tenant are one tenant"
    assert alice != bob and len(alice) == 16 and all(c in "0123456789abcdef" for c in alice + bob), seen
    assert "alice" not in alice and "ka1" not in alice, "a digest, not the tenant's name or key"


def test_the_worker_puts_the_tenant_on_the_engine_request(tiny_model: Path) -> None:
    lane = Lane(max_batch=4, max_wait_s=0.0)
    info = model_info(TINY, tiny_model, load_tokenizer(tiny_model))
    server = InteractiveServer(lane, info, load_tokenizer(tiny_model), TINY, "127.0.0.1", 0)
    server.start()
    answers: list[httpx.Response] = []
    call = threading.Thread(target=lambda: answers.append(httpx.post(
        f"http://127.0.0.1:{server.port}/v1/chat/completions", timeout=30, headers={TENANT_HEADER: "t-17"},
        json={"model": TINY, "messages": HI, "max_tokens": 1})))
    call.start()
    try:
        deadline = time.time() + 20
        taken = []
        while not taken and time.time() < deadline:
            taken = lane.take()
            time.sleep(0.02)
        [request] = taken
        assert request.tenant == "t-17"
        server.finish(GenResult(request.key, [5], "x", "length", len(request.input_ids), 0))
        call.join(30)
        assert answers[0].status_code == 200
    finally:
        server.close()
