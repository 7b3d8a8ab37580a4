"""API keys: 401 without a valid key; each key sees only its own files and batches."""
from __future__ import annotations

import httpx
import openai
import pytest

from tests.conftest import SQLITE_ONLY, TINY
from tests.live import chat_lines, jsonl


@pytest.fixture(scope="module")
def secured(make_deployment):
    return make_deployment(BLENDSERVE_API_KEYS="key-alice,key-bob").start_all()


def test_missing_or_wrong_key_is_401(secured):
    r = httpx.get(f"{secured.base_url}/batches")
    assert r.status_code == 401 and r.json()["error"]["code"] == "missing_api_key"
    with pytest.raises(openai.AuthenticationError):
        secured.client("key-mallory").files.list()


def test_keys_cannot_see_each_others_objects(secured):
    alice, bob = secured.client("key-alice"), secured.client("key-bob")
    f = alice.files.create(file=("a.jsonl", jsonl(chat_lines(1, TINY))), purpose="batch")
    b = alice.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    for call in (lambda: bob.files.retrieve(f.id), lambda: bob.files.content(f.id),
                 lambda: bob.files.delete(f.id), lambda: bob.batches.retrieve(b.id),
                 lambda: bob.batches.cancel(b.id),
                 lambda: bob.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                                            completion_window="24h")):
        with pytest.raises(openai.NotFoundError):
            call()
    assert f.id not in {x.id for x in bob.files.list()}
    assert b.id not in {x.id for x in bob.batches.list()}
    assert f.id in {x.id for x in alice.files.list()} and alice.batches.retrieve(b.id).id == b.id


def test_dashboard_login_is_a_post_and_the_cookie_a_signed_session(tmp_path, tiny_model):
    """The key is POSTed once, never in a URL; the cookie names the tenant (signed, expiring, never the key);
    a login from another site is refused; a session ends when its key leaves the configuration."""
    from tests.api.conftest import in_process_api

    keys = "acme:sk-acme-1,sk-solo"
    with in_process_api(tmp_path, f"{TINY}={tiny_model}", api_keys=keys, cookie_secure="always") as api:
        root = api.base_url.removesuffix("/v1")
        with httpx.Client(base_url=root) as c:
            assert c.get("/dashboard", params={"key": "sk-acme-1"}).status_code == 401   # a key in a URL opens nothing
            r = c.post("/dashboard/login", data={"key": "sk-acme-1"}, follow_redirects=False)
            assert r.status_code == 303 and r.headers["location"] == "/dashboard"
            cookie = r.headers["set-cookie"]
            assert "sk-acme-1" not in cookie and "Secure" in cookie and "HttpOnly" in cookie
            assert "SameSite=strict" in cookie and "Max-Age=43200" in cookie
            session = r.cookies["blendserve_session"]
            assert c.post("/dashboard/login", data={"key": "sk-wrong"}).status_code == 401
            # Login CSRF: a form on another site POSTing its own key to this dashboard.
            assert c.post("/dashboard/login", data={"key": "sk-solo"}, follow_redirects=False,
                          headers={"Origin": "https://evil.example"}).status_code == 403
            assert c.post("/dashboard/login", data={"key": "sk-solo"}, follow_redirects=False,
                          headers={"Sec-Fetch-Site": "cross-site"}).status_code == 403
        with httpx.Client(base_url=root, cookies={"blendserve_session": session}) as browser:
            assert browser.get("/dashboard").status_code == 200
    # The same data dir and secret-less restart: sessions of the old process end (a random secret per process);
    # with a shared secret they survive a restart, but not the removal of their key.
    with in_process_api(tmp_path, f"{TINY}={tiny_model}", api_keys=keys, session_secret="s3") as api:
        root = api.base_url.removesuffix("/v1")
        with httpx.Client(base_url=root, cookies={"blendserve_session": session}) as browser:
            assert browser.get("/dashboard").status_code == 401
        with httpx.Client(base_url=root) as c:
            session = c.post("/dashboard/login", data={"key": "sk-acme-1"}).cookies.get("blendserve_session") \
                or c.cookies["blendserve_session"]
    with in_process_api(tmp_path, f"{TINY}={tiny_model}", api_keys="acme:sk-acme-2", session_secret="s3") as api:
        with httpx.Client(base_url=api.base_url.removesuffix("/v1"), cookies={"blendserve_session": session}) as b:
            assert b.get("/dashboard").status_code == 401


def test_metrics_token_and_cors(tmp_path, tiny_model):
    from tests.api.conftest import in_process_api

    with in_process_api(tmp_path, f"{TINY}={tiny_model}", api_keys="k1", metrics_token="scrape-me",
                        cors_origins="https://app.example") as api:
        root = api.base_url.removesuffix("/v1")
        assert httpx.get(f"{root}/metrics").status_code == 401
        assert httpx.get(f"{root}/metrics", headers={"Authorization": "Bearer k1"}).status_code == 401
        assert httpx.get(f"{root}/metrics", headers={"Authorization": "Bearer scrape-me"}).status_code == 200
        pre = httpx.options(f"{api.base_url}/files", headers={
            "Origin": "https://app.example", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization"})
        assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == "https://app.example"
        r = httpx.get(f"{api.base_url}/files", headers={"Origin": "https://app.example", "Authorization": "Bearer k1"})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://app.example"
        other = httpx.get(f"{api.base_url}/files", headers={"Origin": "https://evil.example",
                                                           "Authorization": "Bearer k1"})
        assert "access-control-allow-origin" not in other.headers
    with in_process_api(tmp_path, f"{TINY}={tiny_model}", api_keys="k1") as api:     # CORS is off by default
        r = httpx.get(f"{api.base_url}/files", headers={"Origin": "https://app.example", "Authorization": "Bearer k1"})
        assert "access-control-allow-origin" not in r.headers
        assert httpx.get(f"{api.base_url.removesuffix('/v1')}/metrics").status_code == 200   # no token: open


@SQLITE_ONLY
def test_worker_endpoint_answers_the_api_only(make_deployment):
    """With BLENDSERVE_WORKER_SECRET the API's interactive calls go through; a direct call to the worker's
    endpoint without the secret is a 401. A worker listening off loopback without a secret refuses to start."""
    from sqlalchemy import create_engine, select

    from blendserve.core.models import Worker

    d = make_deployment(BLENDSERVE_API_KEYS="k1", BLENDSERVE_WORKER_SECRET="w-secret-9f").start_all()
    r = d.client("k1").chat.completions.create(model=TINY, max_tokens=4,
                                                 messages=[{"role": "user", "content": "hi"}])
    assert r.choices[0].message.content is not None
    url = d.env["BLENDSERVE_DATABASE_URL"] or f"sqlite:///{(d.data_dir / 'blendserve.db').resolve()}"
    with create_engine(url).connect() as conn:
        worker_url = conn.execute(select(Worker.interactive_url)).scalar()
    body = {"model": TINY, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    direct = httpx.post(f"{worker_url}/v1/chat/completions", json=body, timeout=30)
    assert direct.status_code == 401 and direct.json()["error"]["code"] == "invalid_worker_secret"
    wrong = httpx.post(f"{worker_url}/v1/chat/completions", json=body, timeout=30,
                       headers={"X-BlendServe-Worker-Secret": "guess"})
    assert wrong.status_code == 401
    d.env.update(BLENDSERVE_WORKER_SECRET="", BLENDSERVE_WORKER_HOST="0.0.0.0")
    p = d.start("worker", "open-worker")
    assert p.wait(120) != 0
    assert "BLENDSERVE_WORKER_SECRET" in d.log("open-worker")
