"""/health, /ready and /metrics on a live deployment: what a probe and a Prometheus scrape see."""
from __future__ import annotations

import re
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import TINY
from tests.live import TERMINAL, chat_lines, jsonl, run_batch


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
    grown = {k: after[(f"blendserve_{k}_tokens_total", ())] - before[(f"blendserve_{k}_tokens_total", ())]
             for k in ("prompt", "cached", "completion")}
    assert grown["prompt"] == b.usage.input_tokens and grown["completion"] == b.usage.output_tokens
    assert grown["cached"] == b.usage.input_tokens_details.cached_tokens
    workers = {dict(k[1])["worker"]: v for k, v in after.items() if k[0] == "blendserve_worker_tokens_total"}
    assert list(workers.values()) == [b.usage.input_tokens + b.usage.output_tokens]    # it ran the whole batch
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


def test_worker_load_and_planning_rounds(make_deployment):
    """Figures of the worker and scheduler processes reach the API's scrape: the engine's running sequences and
    KV use (pushed with each heartbeat) and every planning round; each role logs its part of the batch."""
    # Eight running sequences and long answers: the batch runs for several heartbeats (one a second), so
    # at least one of them sees it busy even on a fast, quiet machine.
    d = make_deployment(BLENDSERVE_CPU_MAX_BATCH="8").start_all()
    c = d.client()
    f = c.files.create(file=("in.jsonl", jsonl(chat_lines(60, TINY, max_tokens=400))), purpose="batch")
    b = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    busy = {"blendserve_worker_running_sequences": 0.0, "blendserve_worker_kv_used_tokens": 0.0}
    while c.batches.retrieve(b.id).status not in TERMINAL:
        for (name, _), v in _samples(d).items():
            if name in busy:
                busy[name] = max(busy[name], v)
        time.sleep(0.2)
    assert c.batches.retrieve(b.id).status == "completed"
    assert busy["blendserve_worker_running_sequences"] > 0 and busy["blendserve_worker_kv_used_tokens"] > 0
    deadline = time.time() + 10                      # idle again by the next heartbeat (a third of the 3 s lease)
    while time.time() < deadline:
        idle = {k[0]: v for k, v in _samples(d).items() if k[0] in busy}
        if idle == {n: 0.0 for n in busy}:
            break
        time.sleep(0.3)
    assert idle == {n: 0.0 for n in busy}

    after = _samples(d)
    rounds = after[("blendserve_planning_rounds_total", (("model", TINY),))]
    assert rounds >= 1
    assert after[("blendserve_planning_round_duration_seconds_count", (("model", TINY),))] == rounds
    assert after[("blendserve_planning_round_duration_seconds_bucket", (("le", "+Inf"), ("model", TINY)))] == rounds
    assert after[("blendserve_planning_round_duration_seconds_sum", (("model", TINY),))] > 0
    assert after[("blendserve_planned_requests_total", (("model", TINY),))] >= 60

    progress = httpx.get(f"{_root(d)}/dashboard/batches/{b.id}", timeout=10).json()
    assert progress["done"] == progress["total"] == 60 and progress["eta_s"] is None
    # One log line per planning round (requests, estimate, balance), per batch transition, per worker claim.
    sched, worker = d.log("scheduler", tail=None), d.log("worker", tail=None)
    assert re.search(rf"planned \d+ request\(s\) of {TINY} .* estimated [\d.e+-]+s, .*\(balance [\d.e+-]+\)", sched)
    assert f"batch {b.id} valid: 60 requests" in sched and f"batch {b.id} finalizing" in sched
    assert f"batch {b.id} completed: 60 output line(s)" in sched
    assert re.search(r"claimed chunk \d+ \(\d+ requests\)", worker)
