"""The dashboard in a real headless Chromium (Debian's, driven by Playwright) while a batch runs."""
from __future__ import annotations

import shutil
import time

import httpx
import pytest
from playwright.sync_api import sync_playwright
from sqlalchemy import delete, func, select

from blendserve.api.dashboard import eta_of
from blendserve.core.db import make_engine, make_sessionmaker
from blendserve.core.models import Batch, PlanningRound, Request, Worker
from tests.conftest import TINY
from tests.live import chat_lines, jsonl, wait_batch


@pytest.fixture(scope="module")
def browser():
    exe = shutil.which("chromium")
    assert exe, "Debian's chromium is required (scripts/setup.sh installs it)"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        yield b
        b.close()


# Keys long enough that a signed cookie cannot hold one by chance (base64 of ~40 bytes holds a given
# two-character string about once in seventy cookies).
MINE, THEIRS = "dash-key-mine-4c1e", "dash-key-theirs-9b07"


def test_dashboard_shows_a_running_batch(make_deployment, browser, tmp_path):
    # The harness's 3 s lease beats every second, and a worker is stale after two missed beats: a loaded
    # CI machine can delay one that long, so this page is read under a 9 s lease (a beat every 3 s).
    d = make_deployment(BLENDSERVE_API_KEYS=f"{MINE},{THEIRS}", BLENDSERVE_LEASE_SECONDS="9").start_all()
    c = d.client(MINE)
    f = c.files.create(file=("in.jsonl", jsonl(chat_lines(60, TINY, max_tokens=48))), purpose="batch")
    b = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    wait_batch(c, b.id, until=lambda x: x.request_counts and x.request_counts.completed >= 4)
    root = d.base_url.removesuffix("/v1")

    page = browser.new_page()
    assert page.goto(f"{root}/dashboard").status == 401          # no key: the key form, not the data
    assert page.locator("input[name=key]").count() == 1
    page.fill("input[name=key]", MINE)                              # POSTed once; a signed session comes back
    page.click("button[type=submit]")
    assert page.url == f"{root}/dashboard"
    cookie = next(c for c in page.context.cookies() if c["name"] == "blendserve_session")
    assert MINE not in cookie["value"] and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    row = page.locator(f"tr[data-batch='{b.id}']")
    assert row.count() == 1
    assert row.locator("td.status").inner_text() in ("in_progress", "finalizing", "completed")
    pct = float(row.locator("[role=progressbar]").get_attribute("aria-valuenow"))
    assert 0 < pct <= 100
    done, total = row.locator("td.num").nth(0).inner_text().split("/")
    assert int(total) == 60 and int(done) >= 4
    assert row.locator("td.eta").get_attribute("data-source") in ("observed", "estimate", "overdue", "")
    worker = page.locator("#workers tr[data-worker]")
    assert worker.count() == 1 and worker.locator("td").filter(has_text="tiny-llama").count() == 1
    deadline = time.time() + 10                                  # its first heartbeat comes a beat after it starts
    while not worker.locator("td.running").inner_text().isdigit() and time.time() < deadline:
        time.sleep(0.2)                                          # (the page refreshes itself)
    running = worker.locator("td.running").inner_text()          # pushed by the worker's heartbeat
    assert running.isdigit() and " / " in worker.locator("td.kv").inner_text()
    assert page.locator("#timeline polyline").first.get_attribute("points").count(",") == 30
    assert page.locator("#timeline polyline.planned").get_attribute("points").count(",") >= 1
    rounds = page.locator("#rounds tr").filter(has_text="tiny-llama")
    assert rounds.count() >= 1 and rounds.first.locator("td.balance").inner_text() != "\u2013"
    page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
    assert (tmp_path / "dashboard.png").stat().st_size > 10_000

    other = browser.new_page()                                      # another key sees none of it
    other.goto(f"{root}/dashboard")
    other.fill("input[name=key]", THEIRS)
    other.click("button[type=submit]")
    assert other.locator(f"tr[data-batch='{b.id}']").count() == 0
    assert httpx.get(f"{root}/dashboard", headers={"Authorization": f"Bearer {MINE}"}).text.count(b.id) >= 1
    # The same progress as JSON (what `blendserve status` shows), under the same keys.
    mine = httpx.get(f"{root}/dashboard/batches/{b.id}", headers={"Authorization": f"Bearer {MINE}"})
    assert mine.status_code == 200 and mine.json()["total"] == 60 and mine.json()["done"] >= 4
    theirs = httpx.get(f"{root}/dashboard/batches/{b.id}", headers={"Authorization": f"Bearer {THEIRS}"})
    assert theirs.status_code == 404
    assert httpx.get(f"{root}/dashboard/batches/{b.id}").status_code == 401


# What the page shows of a batch, read in one call: (status, drawn, phase, "done/total", reason, phase text).
_ROW = """id => { const r = document.querySelector(`tr[data-batch='${id}']`); if (!r) return null;
  const q = s => r.querySelector(s); const t = s => q(s) ? q(s).textContent.trim() : null;
  return [t("td.status"), r.dataset.drawn, q(".phase") && q(".phase").dataset.phase,
          r.querySelectorAll("td.num")[0].textContent.trim(),
          t(".reason"), t(".phase")]; }"""


def _until(page, batch_id: str, ok, timeout: float = 60.0, seen: list | None = None):
    """Poll the page (which refreshes itself) until ok(row); every reading is appended to `seen`."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        row = page.evaluate(_ROW, batch_id)
        if seen is not None:
            seen.append((time.time(), row))
        if row is not None and ok(row):
            return row
        time.sleep(0.05)
    raise TimeoutError(f"{batch_id}: {page.evaluate(_ROW, batch_id)}")


def test_the_page_tells_the_truth_while_a_batch_runs(make_deployment, browser, tmp_path):
    """Phases before the first result, progress within 2 s of it, a failed batch's reason, a cancelled batch
    drawn apart from a completed one, and a stale worker marked, all read from the page as it refreshes."""
    d = make_deployment(BLENDSERVE_LEASE_SECONDS="30", BLENDSERVE_COMPLETION_WINDOWS="24h,4s")
    d.start("api")
    d.start("scheduler")
    d.wait_ready()                                  # no worker yet: nothing can run
    c = d.client()
    bad = c.files.create(file=("bad.jsonl", jsonl(chat_lines(2, TINY)) + b"not json\n"), purpose="batch")
    failed = c.batches.create(input_file_id=bad.id, endpoint="/v1/chat/completions", completion_window="24h")
    f = c.files.create(file=("in.jsonl", jsonl(chat_lines(40, TINY, max_tokens=32))), purpose="batch")
    late = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="4s")
    gone = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    wait_batch(c, gone.id, until=("in_progress",))
    c.batches.cancel(gone.id)
    b = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    root = d.base_url.removesuffix("/v1")
    page = browser.new_page()
    page.goto(f"{root}/dashboard")

    row = _until(page, failed.id, lambda r: r[0] == "failed")
    assert row[1] == "failed" and "line 3" in row[4] and row[3] == "\u2013", row   # why, where; no 0/0
    row = _until(page, gone.id, lambda r: r[0] == "cancelled")
    assert row[1] == "cancelled" and row[3] == "0/40", row            # none ran: not a full bar of "failed"
    row = _until(page, late.id, lambda r: r[0] == "expired")        # its window ended before any worker came
    assert row[1] == "expired" and row[3] == "0/40" and "completion window" in row[4], row
    row = _until(page, b.id, lambda r: r[0] == "in_progress")
    assert row[2] == "waiting for a worker" and f"no live worker serves {TINY}" in row[5], row   # not 0/40

    d.start("worker")
    t_worker = time.time()
    seen: list = []
    row = _until(page, b.id, lambda r: r[2] is None and int(r[3].split("/")[0]) > 0, seen=seen)
    shown_at = seen[-1][0]
    url = d.env["BLENDSERVE_DATABASE_URL"] or f"sqlite:///{d.data_dir / 'blendserve.db'}"
    sessions = make_sessionmaker(make_engine(url))
    with sessions() as s:
        first = s.scalar(select(func.min(Request.finished_at)).where(Request.batch_id == b.id))
    assert first is not None and shown_at - first <= 2.0, (shown_at - first, row)
    print(f"first result written {first - t_worker:.2f} s after the worker started, shown {shown_at - first:.2f} s "
          f"after it was written; phases before it: {sorted({r[2] for _, r in seen[:-1] if r})}")
    before = {r[2] for _, r in seen[:-1] if r is not None}
    assert before <= {"planning", "waiting for a worker", "warming up"}, before   # never a bar before it

    wait_batch(c, b.id)
    done = _until(page, b.id, lambda r: r[0] == "completed")
    assert done[1] == "done" and done[3] == "40/40"
    colour = "id => getComputedStyle(document.querySelector(`tr[data-batch='${id}'] .bar > span`)).backgroundColor"
    colours = {page.evaluate(colour, x) for x in (b.id, gone.id, late.id)}
    assert len(colours) == 3                        # completed green; cancelled and expired drawn apart from it

    now, lease = time.time(), 30.0
    with sessions.begin() as s:                     # two workers that stopped beating: one stale, one past its lease
        for wid, age in (("worker_stale_dash", 0.8 * lease), ("worker_gone_dash", 1.5 * lease)):
            s.add(Worker(id=wid, model="stopped-model", engine="cpu", kv_capacity_tokens=1024, host="h", pid=1,
                         started_at=now - 100, heartbeat_at=now - age, running_sequences=137))
    try:
        page.reload()
        stale = page.locator("tr[data-worker='worker_stale_dash']")
        assert stale.get_attribute("data-stale") == "1" and "(stale)" in stale.inner_text()
        assert stale.locator("td.running").inner_text() != "137"            # an old figure is not shown as now
        assert page.locator("tr[data-worker='worker_gone_dash']").count() == 0
        live = page.locator("#workers tr[data-worker]").filter(has_text=TINY)
        assert live.count() == 1 and live.get_attribute("data-stale") is None
        ticks = page.locator("#timeline .x-axis text")
        assert ticks.count() >= 5 and ":" in ticks.first.text_content()   # a time axis, labelled
        assert page.locator("#timeline .y-axis text").filter(has_text="tokens/s").count() == 1
        page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
        print(f"screenshot: {tmp_path / 'dashboard.png'}")
        tables = httpx.get(f"{root}/dashboard?part=tables").text      # what the page fetches every second
        assert b.id in tables and "worker_stale_dash" in tables and 'id="timeline"' not in tables
    finally:
        with sessions.begin() as s:
            s.execute(delete(Worker).where(Worker.id.in_(("worker_stale_dash", "worker_gone_dash"))))


def test_eta_from_the_estimate_then_the_observed_rate():
    """Before enough of a batch ran, its ETA is the latest round's estimate; then its own rate takes over."""
    now = 10_000.0
    b = Batch(in_progress_at=int(now - 100), first_run_at=now - 60)
    rnd = PlanningRound(started_at=now - 30, duration_s=2.0, est_seconds=100.0)
    assert eta_of(b, 0, 200, None, now) == (None, None)                  # nothing ran, no estimate
    assert eta_of(b, 2, 200, rnd, now) == (72.0, "estimate")             # 30 - 2 s of its 100 s have passed
    assert eta_of(b, 9, 200, rnd, now) == (72.0, "estimate")             # under 5% done: still the estimate
    assert eta_of(b, 20, 200, rnd, now) == (60.0 * 180 / 20, "observed")  # 20 in the 60 s since the first ran
    # Its first result came 10 s ago, after a 50 s warm-up: 19 more since then, 180 to go: 10 * 180 / 19 s.
    assert eta_of(b, 20, 200, rnd, now, first_result=now - 10) == (10.0 * 180 / 19, "observed")
    late = PlanningRound(started_at=now - 300, duration_s=2.0, est_seconds=100.0)
    assert eta_of(b, 2, 200, late, now) == (None, "overdue")             # an estimate overrun gives no time
    # A round that planned 20 requests (a window, an intake's last lines) estimated 10 s for them: the batch's
    # 198 left take 99 s by that estimate, not 10.
    part = PlanningRound(started_at=now - 1, duration_s=0.0, est_seconds=10.0, requests=20)
    assert eta_of(b, 2, 200, part, now) == pytest.approx((99.0 - 1.0, "estimate"))
    whole = PlanningRound(started_at=now - 1, duration_s=0.0, est_seconds=10.0, requests=500)
    assert eta_of(b, 2, 200, whole, now) == (9.0, "estimate")            # a round holding all of it: as estimated


def test_status_line_says_the_phase_and_the_reason():
    """`blendserve status` prints the dashboard's words: the phase before a first result; and a failure's reason."""
    from types import SimpleNamespace

    from blendserve.client import _summary

    counts = SimpleNamespace(completed=0, failed=0, total=200)
    running = SimpleNamespace(id="batch_x", status="in_progress", request_counts=counts)
    p = {"tokens_per_s": 0.0, "eta_s": 30.0, "eta_source": "estimate", "phase": "warming up", "reason": None}
    assert "warming up" in _summary(running, p) and "tok/s" not in _summary(running, p)
    assert "1,200 tok/s" in _summary(running, {**p, "phase": "running", "tokens_per_s": 1200.0})
    assert _summary(running, {**p, "eta_s": None, "eta_source": "overdue"}).endswith("ETA overdue (the plan's "
                                                                                    "estimate passed)")
    err = SimpleNamespace(code="invalid_json", line=3, message="not JSON")
    failed = SimpleNamespace(id="batch_y", status="failed", errors=SimpleNamespace(data=[err, err]),
                             request_counts=SimpleNamespace(completed=0, failed=0, total=0))
    assert _summary(failed).endswith("; invalid_json (line 3): not JSON; and 1 more")


def test_phases_of_a_running_batch():
    """Before its first result a batch says what it waits for; after it, it is simply running."""
    from blendserve.api.dashboard import phase_of

    waiting = Batch(status="in_progress", first_run_at=None)
    assert phase_of(waiting, 0, 12) == "planning"                       # some requests not planned yet
    assert phase_of(waiting, 0, 0) == "waiting for a worker"            # all planned, none handed to an engine
    assert phase_of(Batch(status="in_progress", first_run_at=1.0), 0, 0) == "warming up"
    assert phase_of(Batch(status="in_progress", first_run_at=1.0), 1, 0) == "running"
    assert phase_of(Batch(status="completed", first_run_at=1.0), 5, 0) is None
