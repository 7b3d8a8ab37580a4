"""A scripted attack on a live API process with two tenants: nothing is read before a key, nothing 500s, no
tenant reads another's objects, and no key reaches the logs.

The API runs alone (no scheduler or worker: batches stay `validating`, which is all the routes need), as its
own process, so its memory can be read from /proc while 100 MB bodies are thrown at it.
"""
from __future__ import annotations

import json
import socket
import time
from urllib.parse import quote

import httpx
import pytest

from tests.conftest import TINY
from tests.harness.sockets import ready
from tests.live import chat_lines, jsonl

KEYS = {"ka1": "sk-alpha-one-4f1d9c", "ka2": "sk-alpha-two-77e0ab", "kb1": "sk-beta-one-c3a9e2"}
WRONG = ("sk-mallory-0000", "sk-alpha-one-4f1d9", "sk-alpha-one-4f1d9c-", "", "Bearer", "sk-\u00e9t\u00e9")
MB = 1024 * 1024
# Values that broke parsers before: NUL, digits str.isdigit() takes and int() may not, an unpaired surrogate
# (as raw UTF-8 bytes in a URL), control and bidi characters, very long text.
HOSTILE = ["\x00", "a\x00b", "\u00b2", "\u0663\u0666\u0660\u0660", "\uff13\uff16\uff10\uff10", "%ED%A0%80", "\u202e",
           "\r\n", "-1", "9" * 40, "1e9", "x" * 5000, "../../etc/passwd", "' OR 1=1 --", "null"]


@pytest.fixture(scope="module")
def api(make_deployment):
    d = make_deployment(BLENDSERVE_API_KEYS=f"alpha:{KEYS['ka1']},alpha:{KEYS['ka2']},beta:{KEYS['kb1']}",
                        BLENDSERVE_METRICS_TOKEN="metrics-token-5be1")
    d.start("api")
    d.wait_ready()
    return d


def rss_kb(d) -> int:
    for line in open(f"/proc/{d.procs['api'].pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def raw_request(port: int, head: bytes, body_bytes: int, chunked: bool) -> tuple[int, int]:
    """Send a request line and headers only and wait for the answer (it comes with no body byte sent, or the
    test fails here), then try to push body_bytes anyway. Returns (status, body bytes the server let in)."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(head)
    assert ready([s], 20)[0], "no answer within 20 s to headers alone"
    answer = s.recv(65536)
    status = int(answer.split(b" ", 2)[1])
    pushed, chunk = 0, b"x" * (256 * 1024)
    s.settimeout(5)
    try:
        while pushed < body_bytes:
            data = (b"%x\r\n" % len(chunk) + chunk + b"\r\n") if chunked else chunk
            s.sendall(data)
            pushed += len(chunk)
    except (TimeoutError, BrokenPipeError, ConnectionResetError):
        pass
    finally:
        s.close()
    return status, pushed


def test_hundred_megabyte_bodies_are_refused_from_the_headers(api):
    """100 MB unauthenticated bodies, declared and chunked, on every POST route: each gets its 401 before a
    byte of body is sent; the server then closes the connection (it lets in at most what the kernel's socket
    buffers hold, never the 100 MB), and its memory does not move."""
    before = rss_kb(api)
    for path in ("/v1/files", "/v1/batches", "/v1/chat/completions", "/v1/completions",
                 "/v1/batches/batch_x/cancel", "/v1/embeddings", "/v1/responses"):
        for chunked, auth in ((False, b""), (True, b""), (False, b"Authorization: Bearer sk-wrong\r\n")):
            framing = b"Transfer-Encoding: chunked\r\n" if chunked else b"Content-Length: %d\r\n" % (100 * MB)
            head = (b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" % path.encode()
                    + framing + auth + b"\r\n")
            status, let_in = raw_request(api.port, head, 100 * MB, chunked)
            assert status == 401, (path, chunked, status)
            assert let_in < 100 * MB, (path, chunked, let_in)     # the server hung up instead of reading it all
    grown_mb = (rss_kb(api) - before) / 1024
    assert grown_mb < 16, f"the API grew {grown_mb:.1f} MB answering unauthenticated bodies"
    assert httpx.get(f"{api.base_url.removesuffix('/v1')}/health").status_code == 200


def test_authenticated_bodies_are_bounded_per_route(api):
    h = {"Authorization": f"Bearer {KEYS['ka1']}"}
    with httpx.Client(base_url=api.base_url, headers=h, timeout=30) as c:
        r = c.post("/batches", content=b"{" + b" " * (200 * 1024) + b"}", headers={"content-type": "application/json"})
        assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"

        def stream():              # chunked, no Content-Length: the bound is counted as it arrives
            for _ in range(40):
                yield b" " * (256 * 1024)

        r = c.post("/chat/completions", content=stream(), headers={"content-type": "application/json"})
        assert r.status_code == 413
        r = c.post("/batches", content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 400
    # Unauthenticated malformed JSON is a 401, not a 400: the body is never looked at.
    r = httpx.post(f"{api.base_url}/batches", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 401


def seed(d, key: str) -> tuple[str, str]:
    h = {"Authorization": f"Bearer {key}"}
    f = httpx.post(f"{d.base_url}/files", headers=h, files={"file": ("in.jsonl", jsonl(chat_lines(2, TINY)))},
                   data={"purpose": "batch"}, timeout=30).json()
    b = httpx.post(f"{d.base_url}/batches", headers=h, timeout=30, json={
        "input_file_id": f["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"}).json()
    return f["id"], b["id"]


def requests_on_every_route(file_id: str, batch_id: str) -> list[tuple[str, str, dict]]:
    """(method, path, httpx kwargs) for every route that names an object."""
    return [("GET", f"/v1/files/{file_id}", {}), ("GET", f"/v1/files/{file_id}/content", {}),
            ("DELETE", f"/v1/files/{file_id}", {}), ("GET", f"/v1/batches/{batch_id}", {}),
            ("POST", f"/v1/batches/{batch_id}/cancel", {}), ("GET", f"/dashboard/batches/{batch_id}", {}),
            ("POST", "/v1/batches", {"json": {"input_file_id": file_id, "endpoint": "/v1/chat/completions",
                                              "completion_window": "24h"}}),
            ("GET", "/v1/files", {"params": {"after": file_id}}),
            ("GET", "/v1/batches", {"params": {"after": batch_id}})]


def test_hostile_input_and_other_tenants_ids(api):
    root = api.base_url.removesuffix("/v1")
    alpha_file, alpha_batch = seed(api, KEYS["ka1"])
    beta_file, beta_batch = seed(api, KEYS["kb1"])
    statuses: list[tuple[int, str]] = []
    with httpx.Client(base_url=root, timeout=30) as c:
        def call(method: str, path: str, key: str | None, **kw) -> httpx.Response:
            headers = {"Authorization": f"Bearer {key}".strip().encode()} if key is not None else {}
            r = c.request(method, path, headers=headers, **kw)
            statuses.append((r.status_code, f"{method} {path[:80]!r}"))
            return r

        # Another tenant's ids on every route: 404 (the list cursor too), never the object.
        for method, path, kw in requests_on_every_route(alpha_file, alpha_batch):
            r = call(method, path, KEYS["kb1"], **kw)
            assert r.status_code == 404, (method, path, r.status_code, r.text)
            assert alpha_file not in r.text or "No file found" in r.text
        assert alpha_file not in call("GET", "/v1/files", KEYS["kb1"]).text
        assert alpha_batch not in call("GET", "/v1/batches", KEYS["kb1"]).text
        # The tenant's other key sees them: objects belong to the tenant, not the key.
        assert call("GET", f"/v1/files/{alpha_file}", KEYS["ka2"]).status_code == 200
        assert call("GET", f"/v1/batches/{alpha_batch}", KEYS["ka2"]).json()["id"] == alpha_batch
        # Wrong and missing keys on every route: 401.
        for wrong in (*WRONG, None):
            for method, path, kw in requests_on_every_route(beta_file, beta_batch):
                r = call(method, path, wrong, **kw)
                assert r.status_code == 401, (wrong, method, path, r.status_code)
        # Hostile values in every path segment, query parameter, form field and JSON field.
        key = KEYS["kb1"]
        for v in HOSTILE:
            seg = v if v.startswith("%") else quote(v, safe="")
            for path in (f"/v1/files/{seg}", f"/v1/files/{seg}/content", f"/v1/batches/{seg}",
                         f"/dashboard/batches/{seg}", f"/v1/models/{seg}"):
                call("GET", path, key)
            call("DELETE", f"/v1/files/{seg}", key)
            call("POST", f"/v1/batches/{seg}/cancel", key)
            for name in ("after", "limit", "purpose", "order"):
                call("GET", "/v1/files", key, params={name: v})
                call("GET", "/v1/batches", key, params={name: v})
            for field in ("purpose", "expires_after[seconds]", "expires_after[anchor]", v[:64] or "x"):
                data = {"purpose": "batch", field: v}
                call("POST", "/v1/files", key, data=data, files={"file": ("in.jsonl", b"{}\n")})
            call("POST", "/v1/files", key, data={"purpose": "batch"}, files={"file": (v[:200], b"{}\n")})
            for field in ("input_file_id", "endpoint", "completion_window"):
                body = {"input_file_id": beta_file, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
                call("POST", "/v1/batches", key, json={**body, field: v})
            call("POST", "/v1/batches", key, json={"input_file_id": beta_file, "endpoint": "/v1/chat/completions",
                                                   "completion_window": "24h", "metadata": {v[:64]: v[:512]},
                                                   "output_expires_after": {"anchor": "created_at", "seconds": v}})
            call("POST", "/v1/chat/completions", key, content=json.dumps({"model": v, "messages": []}).encode())
            call("POST", "/dashboard/login", None, data={"key": v})
        # A key in a URL (an old bookmark) opens nothing, and the access log shows it as key=***.
        for name in ("key", "api_key", "token"):
            assert call("GET", f"/dashboard?{name}={KEYS['ka2']}", None).status_code == 401
            call("GET", f"/v1/files?limit=2&{name}={KEYS['ka2']}", None)
        # The other doors: probes open, metrics behind their token, the dashboard's form and session.
        assert call("GET", "/health", None).status_code == 200
        assert call("GET", "/metrics", None).status_code == 401
        assert call("GET", "/metrics", "metrics-token-5be1").status_code == 200
        assert call("GET", "/dashboard", None).status_code == 401
        login = c.post("/dashboard/login", data={"key": KEYS["kb1"]}, follow_redirects=False)
        assert login.status_code == 303 and KEYS["kb1"] not in login.headers["set-cookie"]
        session = login.cookies["blendserve_session"]
        with httpx.Client(base_url=root, timeout=30, cookies={"blendserve_session": session}) as browser:
            assert browser.get("/dashboard").status_code == 200
            assert browser.get(f"/dashboard/batches/{beta_batch}").status_code == 200
            assert browser.get(f"/dashboard/batches/{alpha_batch}").status_code == 404
            assert browser.get("/v1/files").status_code == 401        # a session opens the dashboard only
        with httpx.Client(base_url=root, timeout=30, cookies={"blendserve_session": session[:-2] + "AA"}) as forged:
            assert forged.get("/dashboard").status_code == 401
    server_errors = [s for s in statuses if s[0] >= 500]
    assert not server_errors, server_errors[:10]
    assert len(statuses) > 400
    # No key, right or wrong, in any line the API logged while all of this ran.
    time.sleep(0.5)
    log = api.log("api", tail=None)
    assert "api listening on" in log and "GET /v1/files" in log       # the access log was on
    assert "/dashboard?key=***" in log
    for k in (*KEYS.values(), *(w for w in WRONG if len(w) > 8)):
        assert k not in log, f"a key is in the API's log: {k[:6]}..."
