"""/health, /ready and /metrics on a live deployment: what a probe and a Prometheus scrape see."""
from __future__ import annotations

import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import TINY
from tests.live import chat_lines, run_batch


def _root(d) -> str:
    return d.base_url.removesuffix("/v1")


def _samples(d) -> dict[tuple[str, tuple], float]:
    r = httpx.get(f"{_root(d)}/metrics", timeout=10)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(r.text) for s in fam.samples}


def test_metrics_follow_a_batch(make_deployment):
    d = make_deployment(BLENDSERVE_API_KEYS="k1").start_all()
    before = _samples(d)
    c = d.client("k1")
    b = run_batch(c, chat_lines(6, TINY, max_tokens=5, prefix="Shared system words. " * 4))
    assert b.status == "completed"
    after = _samples(d)
    assert after[("blendserve_batches", (("status", "completed"),))] == before.get(
        ("blendserve_batches", (("status", "completed"),)), 0) + 1
    assert after[("blendserve_requests", (("model", TINY), ("status", "completed")))] >= 6
    grown = {k: after[("blendserve_%s_tokens_total" % k, ())] - before[("blendserve_%s_tokens_total" % k, ())]
             for k in ("prompt", "cached", "completion")}
    assert grown["prompt"] == b.usage.input_tokens and grown["completion"] == b.usage.output_tokens
    assert grown["cached"] == b.usage.input_tokens_details.cached_tokens
    workers = {dict(k[1])["worker"]: v for k, v in after.items() if k[0] == "blendserve_worker_tokens_per_second"}
    assert len(workers) == 1 and next(iter(workers.values())) > 0          # it just ran the batch
    ages = [v for k, v in after.items() if k[0] == "blendserve_worker_heartbeat_age_seconds"]
    assert ages and 0 <= ages[0] < 5
    # Probes and scrapers carry no key: the ops endpoints answer without one, the API does not.
    assert httpx.get(f"{_root(d)}/health").json() == {"status": "ok"}
    assert httpx.get(f"{d.base_url}/batches").status_code == 401


def test_ready_says_why_not(make_deployment):
    d = make_deployment().start_all()
    r = httpx.get(f"{_root(d)}/ready", timeout=10)
    assert r.status_code == 200 and r.json() == {"status": "ready", "reasons": []}
    d.kill("worker")
    deadline = time.time() + 30          # the worker's heartbeat lapses after a lease (3 s in tests)
    while time.time() < deadline and httpx.get(f"{_root(d)}/ready").status_code == 200:
        time.sleep(0.5)
    r = httpx.get(f"{_root(d)}/ready", timeout=10)
    assert r.status_code == 503 and r.json()["reasons"] == [f"no live worker for model {TINY!r}"]
    d.kill("scheduler")
    deadline = time.time() + 30
    while time.time() < deadline and len(httpx.get(f"{_root(d)}/ready").json()["reasons"]) < 2:
        time.sleep(0.5)
    assert "no scheduler holds a fresh lease" in httpx.get(f"{_root(d)}/ready").json()["reasons"]
