"""The dashboard in a real headless Chromium (Debian's, driven by Playwright) while a batch runs."""
from __future__ import annotations

import shutil

import httpx
import pytest
from playwright.sync_api import sync_playwright

from core.models import Batch, PlanningRound
from server.dashboard import eta_of
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
    d = make_deployment(BLENDSERVE_API_KEYS=f"{MINE},{THEIRS}").start_all()
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
    assert row.locator("td.eta").get_attribute("data-source") in ("observed", "estimate", "")
    worker = page.locator("#workers tr[data-worker]")
    assert worker.count() == 1 and worker.locator("td").filter(has_text="tiny-llama").count() == 1
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


def test_eta_from_the_estimate_then_the_observed_rate():
    """Before enough of a batch ran, its ETA is the latest round's estimate; then its own rate takes over."""
    now = 10_000.0
    b = Batch(in_progress_at=int(now - 100), first_run_at=now - 60)
    rnd = PlanningRound(started_at=now - 30, duration_s=2.0, est_seconds=100.0)
    assert eta_of(b, 0, 200, None, now) == (None, None)                  # nothing ran, no estimate
    assert eta_of(b, 2, 200, rnd, now) == (72.0, "estimate")             # 30 - 2 s of its 100 s have passed
    assert eta_of(b, 9, 200, rnd, now) == (72.0, "estimate")             # under 5% done: still the estimate
    assert eta_of(b, 20, 200, rnd, now) == (60.0 * 180 / 20, "observed")  # 20 in the 60 s since the first ran
    late = PlanningRound(started_at=now - 300, duration_s=2.0, est_seconds=100.0)
    assert eta_of(b, 2, 200, late, now) == (None, None)                  # an estimate already overrun says nothing
