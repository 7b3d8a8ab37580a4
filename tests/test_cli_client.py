"""`blendserve submit | status | cancel` as a user runs them: a real process against a live server."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from tests.conftest import SQLITE_ONLY, TINY
from tests.live import chat_lines, jsonl


def _cli(deployment, *args: str, key: str = "unused") -> subprocess.CompletedProcess:
    env = {**os.environ, "OPENAI_BASE_URL": deployment.base_url, "OPENAI_API_KEY": key}
    return subprocess.run([sys.executable, "-m", "blendserve", *args], env=env, capture_output=True, text=True,
                          timeout=180)


@SQLITE_ONLY
def test_submit_wait_downloads_results(deployment, tmp_path):
    src, out, err = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "err.jsonl"
    rows = chat_lines(5, TINY, max_tokens=4)
    src.write_bytes(jsonl(rows))
    r = _cli(deployment, "submit", str(src), "--wait", "--poll", "0.2", "--output", str(out),
             "--errors", str(err), "--metadata", "job=cli")
    assert r.returncode == 0, r.stderr
    batch_id = r.stdout.strip()
    assert batch_id.startswith("batch_")
    assert "5/5 completed" in r.stderr and "tok/s" in r.stderr      # the progress bar's last state
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(o["custom_id"] for o in got) == sorted(x["custom_id"] for x in rows)
    assert not err.exists()                                          # no error file for a clean batch

    status = _cli(deployment, "status", batch_id, "--json")
    assert status.returncode == 0 and json.loads(status.stdout)["metadata"] == {"job": "cli"}
    listing = _cli(deployment, "status")
    assert batch_id in listing.stdout and "completed" in listing.stdout


@SQLITE_ONLY
def test_cancel_and_clear_errors(deployment, tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_bytes(jsonl(chat_lines(300, TINY, max_tokens=256)))
    batch_id = _cli(deployment, "submit", str(src)).stdout.strip()
    r = _cli(deployment, "cancel", batch_id)
    assert r.returncode == 0 and batch_id in r.stdout and ("cancelling" in r.stdout or "cancelled" in r.stdout)
    again = _cli(deployment, "cancel", batch_id)            # the API's refusal, as one clean line
    assert again.returncode in (0, 2) and "Traceback" not in again.stderr

    missing = _cli(deployment, "status", "batch_doesnotexist")
    assert missing.returncode == 2 and "batch_doesnotexist" in missing.stderr and "Traceback" not in missing.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"custom_id": "a"}\n')
    failed = _cli(deployment, "submit", str(bad), "--wait", "--poll", "0.2")
    assert failed.returncode == 1 and "line 1" in failed.stderr


@SQLITE_ONLY
def test_submit_wait_shows_the_eta(deployment, tmp_path):
    """While the batch runs, the bar shows completed/total, tokens/s and an ETA (BlendServe's, from its
    progress route: the plan's estimate first, then the observed rate). A few short requests finish first, so
    the observed rate is there while the long ones run, however fast the engine (the tiny model's steps take
    milliseconds: 60 equal requests can finish together within one poll)."""
    src = tmp_path / "in.jsonl"
    short = chat_lines(10, TINY, max_tokens=2, prefix="short ")
    for line in short:
        line["custom_id"] = "short-" + line["custom_id"]
    src.write_bytes(jsonl(short + chat_lines(50, TINY, max_tokens=256)))
    r = _cli(deployment, "submit", str(src), "--wait", "--poll", "0.2")
    assert r.returncode == 0, r.stderr
    assert re.search(r"in_progress: +\d+%\|.*\| \d+/60 \[[\d:]+, [\d,]+ tok/s, ETA \d+:\d\d", r.stderr), r.stderr
    assert "60/60 completed" in r.stderr


def test_status_line_shows_rate_and_eta_of_a_running_batch():
    from types import SimpleNamespace

    from blendserve.client import _summary

    b = SimpleNamespace(id="batch_x", status="in_progress",
                        request_counts=SimpleNamespace(completed=30, failed=1, total=100))
    line = _summary(b, {"tokens_per_s": 1234.5, "eta_s": 3725.0, "eta_source": "estimate"})
    assert line == "batch_x  in_progress 30/100 completed, 1 failed, 1,234 tok/s, ETA 1:02:05 (estimate)"
    assert _summary(b, None).endswith("1 failed")                     # a server without the progress route
    assert _summary(b, {"tokens_per_s": 0.0, "eta_s": None, "eta_source": None}).endswith("ETA -")
