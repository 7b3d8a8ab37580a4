"""The API's doors against a hostile caller, on a live API process: a request's head is bounded in bytes, lines
and time before any key is looked at; malformed forms and JSON nested past the parsers are 4xx, never 500;
a batch line nested past the parsers is that line's error, not the batch's."""
from __future__ import annotations

import json
import resource
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler

import httpx
import pytest

from blendserve.core.limit_settings import LimitSettings
from blendserve.protocol.bodies import model_info
from blendserve.scheduler.validation import LineError, ValidRequest, validate
from blendserve.worker.bounded_http import BoundedHTTPServer
from tests.conftest import SQLITE_ONLY, TINY
from tests.harness.sockets import ready

KEYS = {"alpha": "sk-doors-alpha-51f0", "beta": "sk-doors-beta-9a3c"}
MB = 1024 * 1024


@pytest.fixture(scope="module")
def api(make_deployment):
    d = make_deployment(BLENDSERVE_API_KEYS=",".join(f"{t}:{k}" for t, k in KEYS.items()),
                        BLENDSERVE_LIMIT_HEADER_TIMEOUT_S="1.5")
    d.start("api")
    d.wait_ready()
    return d


def rss_mb(d) -> float:
    for line in open(f"/proc/{d.procs['api'].pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def answer_to_huge_header(port: int, size: int) -> tuple[bytes, float]:
    """Push a GET whose one header line is `size` bytes; return what came back (b"" for a closed connection)
    and how long after the first byte it came."""
    s = socket.create_connection(("127.0.0.1", port))
    s.setblocking(False)
    head = b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Filler: "
    chunk, sent, t0 = b"a" * (256 * 1024), 0, time.monotonic()
    try:
        s.sendall(head)
        while sent < size and time.monotonic() - t0 < 10:
            readable, writable = ready([s], 0.5, write=True)
            if readable:
                break
            if writable:
                try:
                    sent += s.send(chunk)
                except BlockingIOError:
                    continue
                except (BrokenPipeError, ConnectionResetError):
                    break
        ready([s], 5)
        took = time.monotonic() - t0
        try:
            return s.recv(4096), took
        except (ConnectionResetError, BlockingIOError):
            return b"", took
    finally:
        s.close()


@SQLITE_ONLY       # the doors are before any query
def test_a_200_megabyte_header_is_refused_at_once(api):
    """Unauthenticated, 200 MB in one header line: the API answers 431 (or hangs up) within a second of the
    first byte, its memory grows less than 20 MB, and the other tenant is served meanwhile."""
    before = rss_mb(api)
    timings: list[float] = []

    def other_tenant() -> None:
        for _ in range(10):
            t = time.monotonic()
            r = httpx.get(f"{api.base_url}/models", headers={"Authorization": f"Bearer {KEYS['beta']}"}, timeout=30)
            assert r.status_code == 200
            timings.append(time.monotonic() - t)
            time.sleep(0.05)

    other = threading.Thread(target=other_tenant)
    other.start()
    for _ in range(2):
        answer, took = answer_to_huge_header(api.port, 200 * MB)
        assert took < 1.0, f"answered after {took:.2f} s"
        assert answer == b"" or answer.startswith(b"HTTP/1.1 431"), answer[:80]
    other.join()
    grown = rss_mb(api) - before
    assert grown < 20, f"the API grew {grown:.1f} MB"
    assert max(timings) < 1.0, timings


@SQLITE_ONLY       # the doors are before any query
def test_too_many_headers_are_refused(api):
    lines = b"".join(b"X-H%d: v\r\n" % i for i in range(300))
    with socket.create_connection(("127.0.0.1", api.port), timeout=5) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n" + lines + b"\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 431")
    r = httpx.get(f"{api.base_url.removesuffix('/v1')}/health", headers={f"x-h{i}": "v" for i in range(50)})
    assert r.status_code == 200        # fifty is well within the bound


@SQLITE_ONLY       # the doors are before any query
def test_bodies_on_a_kept_connection_are_not_counted_as_heads(api):
    """Megabyte bodies and requests one after another on one connection: only heads count."""
    body = b'{"model": "no-such-model", "x": "' + b"a" * (2 * MB) + b'"}'
    with httpx.Client(base_url=api.base_url, headers={"Authorization": f"Bearer {KEYS['alpha']}"}, timeout=30) as c:
        for _ in range(5):
            r = c.post("/chat/completions", content=body, headers={"content-type": "application/json"})
            assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
            assert c.get("/models").status_code == 200
        time.sleep(2)                  # past the head timeout (1.5 s) between two requests: kept alive
        assert c.get("/models").status_code == 200


@SQLITE_ONLY       # the doors are before any query
def test_slow_heads_are_closed_after_the_timeout(api):
    """A thousand connections that never finish their heads (silent, or a byte at a time) are all closed
    once BLENDSERVE_LIMIT_HEADER_TIMEOUT_S (1.5 s here) has passed; a prompt request is served meanwhile."""
    socks: list[socket.socket] = []
    try:
        room = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        for i in range(1000 if room >= 4096 else 400):       # the test and the API each hold one end
            s = socket.create_connection(("127.0.0.1", api.port))
            if i % 2:
                s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n")
            socks.append(s)
        drip = socks[1]
        t0 = time.monotonic()
        while time.monotonic() - t0 < 2.5:
            try:
                drip.sendall(b"X")         # one more byte of a header now and then: the deadline stays
            except (BrokenPipeError, ConnectionResetError):
                break
            time.sleep(0.2)
        assert httpx.get(f"{api.base_url.removesuffix('/v1')}/health", timeout=30).status_code == 200
        deadline, open_ = time.monotonic() + 30, set(range(len(socks)))      # generous: CI machines are loaded
        while open_ and time.monotonic() < deadline:
            readable, _ = ready([socks[i] for i in open_], 0.5)
            for s in readable:
                try:
                    data = s.recv(4096)
                except ConnectionResetError:
                    data = b""
                if not data or data.startswith(b"HTTP/1.1 408"):
                    open_.discard(socks.index(s))
        took = time.monotonic() - t0
    finally:            # a failure here must not leave a thousand descriptors to the tests after it
        for s in socks:
            s.close()
    assert not open_, f"{len(open_)} slow connections still open after {took:.1f} s"


@SQLITE_ONLY       # the doors are before any query
def test_a_login_form_of_many_fields_is_a_400(api):
    base = api.base_url.removesuffix("/v1")
    r = httpx.post(f"{base}/dashboard/login", content=b"key=a&b=1&c=2&d=3&e=4",
                   headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 400
    r = httpx.post(f"{base}/dashboard/login", data={"key": KEYS["alpha"]})
    assert r.status_code == 303          # the form itself still logs in


@SQLITE_ONLY       # the doors are before any query
@pytest.mark.parametrize("path", ["/batches", "/chat/completions", "/completions", "/embeddings", "/responses"])
def test_json_nested_100000_deep_is_a_400(api, path):
    depth = 30_000 if path == "/batches" else 100_000         # /batches takes 64 KiB of body
    deep = b'{"model": "' + TINY.encode() + b'", "x": ' + b"[" * depth + b"]" * depth + b"}"
    r = httpx.post(f"{api.base_url}{path}", content=deep, timeout=30,
                   headers={"Authorization": f"Bearer {KEYS['alpha']}", "content-type": "application/json"})
    assert r.status_code == 400, (r.status_code, r.text[:200])
    assert r.json()["error"]["type"] == "invalid_request_error"


@SQLITE_ONLY       # the doors are before any query
def test_a_body_nested_past_the_rule_is_a_400(api):
    """300 levels parse, but no OpenAI body nests like that (and orjson would not store it): a 400 that says so."""
    body = {"model": TINY, "messages": [{"role": "user", "content": "hi"}], "metadata": {}}
    node = body["metadata"]
    for _ in range(300):
        node["a"] = node = {}
    r = httpx.post(f"{api.base_url}/chat/completions", json=body, headers={"Authorization": f"Bearer {KEYS['alpha']}"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "nested_too_deeply"


def test_a_batch_line_nested_5000_deep_is_its_own_error(tiny_model):
    info = model_info(TINY, tiny_model)
    ok = {"method": "POST", "url": "/v1/chat/completions",
          "body": {"model": TINY, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}}
    deep = ('{"custom_id": "deep", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "'
            + TINY + '", "messages": ' + "[" * 5000 + "]" * 5000 + "}}")
    lines = [json.dumps({"custom_id": "a", **ok}).encode(), deep.encode(),
             json.dumps({"custom_id": "b", **ok}).encode()]
    out = list(validate(lines, "/v1/chat/completions", {TINY: info}, 100))
    assert sorted(o.custom_id for o in out if isinstance(o, ValidRequest)) == ["a", "b"]     # the rest runs
    [err] = [o for o in out if isinstance(o, LineError)]
    assert err.custom_id == "deep" and not err.fails_file and err.code == "nested_too_deeply" and err.line == 2
    # 300 levels parse, yet orjson cannot store the parameters (254 at most): the request's own error too
    metadata: dict = {}
    node = metadata
    for _ in range(300):
        node["a"] = node = {}
    parsed = json.dumps({"custom_id": "meta", **ok, "body": {**ok["body"], "metadata": metadata}}).encode()
    [err] = list(validate([parsed], "/v1/chat/completions", {TINY: info}, 100))
    assert isinstance(err, LineError) and err.custom_id == "meta" and err.code == "nested_too_deeply"


def test_the_worker_port_bounds_its_threads():
    """The worker's interactive server runs one thread per connection up to its bound; one more is answered
    503 at once (the API then tries another worker), a freed thread takes the next connection, and a head
    that does not arrive in time gives its thread back."""
    gate = threading.Event()

    class Held(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            gate.wait(20)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = BoundedHTTPServer(("127.0.0.1", 0), Held, max_connections=3, head_timeout_s=1.0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        holders = [threading.Thread(target=httpx.get, args=(url,), kwargs={"timeout": 30}) for _ in range(3)]
        for h in holders:
            h.start()
        deadline = time.monotonic() + 10
        while server.slots._value and time.monotonic() < deadline:      # every thread taken
            time.sleep(0.05)
        r = httpx.get(url, timeout=5)
        assert r.status_code == 503 and r.json()["error"]["code"] == "worker_busy"
        gate.set()
        for h in holders:
            h.join()
        assert httpx.get(url, timeout=5).status_code == 200
        with socket.create_connection(("127.0.0.1", server.server_address[1])) as silent:
            silent.sendall(b"GET / HTTP/1.1\r\n")            # and no more: its thread is given back
            t0 = time.monotonic()
            assert ready([silent], 10)[0] and silent.recv(100) == b""
            assert time.monotonic() - t0 < 3
    finally:
        gate.set()
        server.shutdown()
        server.server_close()


def test_a_tenants_share_must_be_below_the_pool():
    """One tenant's requests in flight can never hold every connection from the API to the workers."""
    with pytest.raises(ValueError, match="BLENDSERVE_LIMIT_POOL_SIZE"):
        LimitSettings(interactive_per_tenant=64, pool_size=64)
    assert LimitSettings(interactive_per_tenant=63, pool_size=64).pool_size == 64


def test_a_burst_of_connections_to_the_worker_port_connects_at_once():
    """The kernel completes a burst of the API's connections while the worker's accept loop is busy (here: not
    running at all), so none waits for a SYN retry past the API's 2-s connect timeout."""
    server = BoundedHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = server.server_address[1]
    try:
        def connect(_: int) -> float:
            t0 = time.monotonic()
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            took = time.monotonic() - t0
            s.close()
            return took
        with ThreadPoolExecutor(64) as pool:
            took = list(pool.map(connect, range(128)))
        assert max(took) < 0.5, sorted(took)[-5:]
    finally:
        server.server_close()
