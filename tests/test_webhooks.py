"""Signed batch events through the real service, to real HTTP receivers, checked by the OpenAI SDK's verifier.

Every terminal status (completed, failed, expired, cancelled) reaches the deployment endpoint and the
tenant's own, each signed with its endpoint's secret; a receiver that is down (and a scheduler killed
meanwhile) gets every event once it is back; the delivery log shows on the tenant's dashboard.
"""
from __future__ import annotations

import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import openai
import pytest
import sqlalchemy as sa

from blendserve.core.webhook_settings import WebhookSettings
from tests.conftest import TINY
from tests.live import chat_lines, free_port, jsonl, wait_batch

SECRET = "whsec_" + base64.b64encode(b"deployment-secret-0123456789abcd").decode()
ACME_SECRET = "whsec_" + base64.b64encode(b"acme-secret-0123456789abcdefghij").decode()
ACME, PLAIN = "key-acme", "key-plain"
RETRY_MAX_S = 1.0


class Receiver:
    """A real HTTP endpoint in a thread: answers `refuse` first posts with 503, then records each post."""

    def __init__(self, refuse: int = 0) -> None:
        self.port, self.refuse, self.got = free_port(), refuse, []
        self.server: ThreadingHTTPServer | None = None

    def up(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:      # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["content-length"]))
                refused = receiver.refuse > 0
                receiver.refuse -= refused
                if not refused:
                    receiver.got.append((dict(self.headers.items()), body, time.time()))
                self.send_response(503 if refused else 200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def down(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks"

    def events(self, secret: str) -> dict[str, openai.types.webhooks.UnwrapWebhookEvent]:
        """Every event received, by batch id, each unwrapped (verified) by the OpenAI SDK."""
        sdk = openai.OpenAI(api_key="unused", webhook_secret=secret)
        out = {}
        for headers, body, _ in self.got:
            event = sdk.webhooks.unwrap(body, headers)
            assert headers["webhook-id"] == event.id and json.loads(body)["object"] == "event"
            out[event.data.id] = event
        return out

    def wait_for(self, n: int, timeout: float = 90) -> None:
        deadline = time.time() + timeout
        while len({h["webhook-id"] for h, _, _ in self.got}) < n and time.time() < deadline:
            time.sleep(0.1)
        assert len({h["webhook-id"] for h, _, _ in self.got}) >= n, self.got


@pytest.fixture(scope="module")
def hooked(make_deployment):
    """A deployment with both endpoints up, a tenant (acme) and a plain key, and back-off capped at 1 s."""
    default, acme = Receiver().up(), Receiver(refuse=2).up()
    d = make_deployment(BLENDSERVE_API_KEYS=f"acme:{ACME},{PLAIN}", BLENDSERVE_WEBHOOK_URL=default.url,
                        BLENDSERVE_WEBHOOK_SECRET=SECRET, BLENDSERVE_WEBHOOK_TENANT_URLS=f"acme={acme.url}",
                        BLENDSERVE_WEBHOOK_TENANT_SECRETS=f"acme={ACME_SECRET}", BLENDSERVE_WEBHOOK_TIMEOUT_S="2",
                        BLENDSERVE_WEBHOOK_RETRY_FIRST_S="0.2", BLENDSERVE_WEBHOOK_RETRY_MAX_S=str(RETRY_MAX_S),
                        BLENDSERVE_COMPLETION_WINDOWS="24h,2s").start_all()
    yield d, default, acme
    for r in (default, acme):
        if r.server is not None:
            r.down()


def _create(c: openai.OpenAI, rows: list[dict], window: str = "24h") -> str:
    f = c.files.create(file=("in.jsonl", jsonl(rows)), purpose="batch")
    return c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window=window).id


def _deliveries(d) -> list:
    url = d.env["BLENDSERVE_DATABASE_URL"] or f"sqlite:///{d.data_dir / 'blendserve.db'}"
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT batch_id, target, status, attempts, last_error FROM webhook_deliveries"
                                    )).all()
    engine.dispose()
    return rows


def test_every_terminal_status_reaches_both_endpoints_signed(hooked):
    d, default, acme = hooked
    c, plain = d.client(ACME), d.client(PLAIN)
    slow = chat_lines(40, TINY, max_tokens=1800)
    expect = {_create(c, chat_lines(2, TINY)): "batch.completed",
              _create(c, slow, window="2s"): "batch.expired",
              _create(c, [{**chat_lines(1, TINY)[0], "url": "/v1/completions"}]): "batch.failed"}
    cancelled = _create(c, slow)
    c.batches.cancel(cancelled)
    expect[cancelled] = "batch.cancelled"
    theirs = _create(plain, chat_lines(1, TINY))
    for bid in [*expect, theirs]:
        assert wait_batch(c if bid != theirs else plain, bid, timeout=90).status == \
            {**expect, theirs: "batch.completed"}[bid].removeprefix("batch.")
    default.wait_for(5)
    acme.wait_for(4)

    got = default.events(SECRET)                # the deployment endpoint: every batch
    assert {b: e.type for b, e in got.items()} == {**expect, theirs: "batch.completed"}
    mine = acme.events(ACME_SECRET)             # the tenant's own: its batches alone, after two 503s
    assert {b: e.type for b, e in mine.items()} == expect
    assert acme.refuse == 0
    with pytest.raises(openai.InvalidWebhookSignatureError):     # another endpoint's secret does not verify
        acme.events(SECRET)
    with pytest.raises(openai.InvalidWebhookSignatureError):
        default.events(ACME_SECRET)

    page = httpx.get(f"http://127.0.0.1:{d.port}/dashboard", headers={"Authorization": f"Bearer {ACME}"}).text
    assert 'id="deliveries"' in page and cancelled in page and "batch.expired" in page and theirs not in page
    assert "HTTP 503" in page                   # the tenant endpoint's refusals, in its log


def test_a_receiver_down_gets_every_event_once_up_across_a_scheduler_restart(hooked):
    d, default, _ = hooked
    default.down()
    plain = d.client(PLAIN)
    ids = [_create(plain, chat_lines(1, TINY, prefix=f"down {i} ")) for i in range(2)]
    ids.append(_create(plain, chat_lines(40, TINY, max_tokens=1800)))
    plain.batches.cancel(ids[-1])
    for bid in ids:
        wait_batch(plain, bid, timeout=90)
    deadline = time.time() + 30
    while time.time() < deadline:              # refused a few times: the receiver is down
        tries = {r.batch_id: r.attempts for r in _deliveries(d) if r.batch_id in ids}
        if len(tries) == 3 and min(tries.values()) >= 2:
            break
        time.sleep(0.2)
    assert len(tries) == 3 and min(tries.values()) >= 2, tries
    assert all(r.status == "pending" and "ConnectError" in r.last_error for r in _deliveries(d) if r.batch_id in ids)

    d.kill("scheduler")                         # the queue is in the database: a new scheduler carries on
    d.start("scheduler")
    d.wait_ready()
    before, back = len(default.got), time.time()
    default.up()
    default.wait_for(len({h["webhook-id"] for h, _, _ in default.got[:before]}) + 3, timeout=30)
    got = default.events(SECRET)
    assert {got[b].type for b in ids} == {"batch.completed", "batch.cancelled"}
    arrived = max(t for _, body, t in default.got if json.loads(body)["data"]["id"] in ids)
    assert arrived - back < RETRY_MAX_S + 10, arrived - back      # the cap bounds the wait once it is up
    assert {r.status for r in _deliveries(d) if r.batch_id in ids} == {"delivered"}


def test_backoff_doubles_up_to_its_cap_and_bad_secrets_fail_at_start():
    from blendserve.scheduler.webhooks import Deliverer

    hooks = WebhookSettings(url="http://127.0.0.1:9/", secret=SECRET, retry_first_s=5, retry_max_s=60)
    waits = [Deliverer(hooks, None, None, lambda: True).wait_after(n) for n in range(1, 12)]
    assert 4 <= waits[0] <= 5 and 8 <= waits[1] <= 10 and max(waits) <= 60 and waits[-1] >= 48
    with pytest.raises(ValueError, match="whsec_"):
        WebhookSettings(url="http://x/", secret="plain-text")
    with pytest.raises(ValueError, match="acme"):
        WebhookSettings(tenant_urls="acme=http://x/")       # a tenant endpoint without its secret
    assert WebhookSettings(url="http://x/", secret=SECRET, tenant_urls="acme=http://a/",
                           tenant_secrets=f"acme={ACME_SECRET}").targets("tenant:acme") == ["", "tenant:acme"]
