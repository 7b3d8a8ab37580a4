"""The service with the BlendServe planner: every request runs exactly once, warm-up first, across jobs."""
from __future__ import annotations

import pytest

from tests.conftest import TINY
from tests.live import jsonl, read_lines, wait_batch


def mixed(n: int, tag: str) -> list[dict]:
    """Few-shot questions behind two shared prefixes (1-2 token answers) and chat with longer answers."""
    shots = ["Q: 2+2? A: 4. Q: 3+3? A: 6. " * 8, "Translate: cat -> chat, dog -> chien. " * 8]
    rows = []
    for i in range(n):
        if i % 3 == 2:
            body = {"messages": [{"role": "user", "content": f"Tell me a story {i}"}], "max_tokens": 24}
        else:
            body = {"messages": [{"role": "system", "content": shots[i % 2]},
                                 {"role": "user", "content": f"Q{i}?"}], "max_tokens": 2}
        rows.append({"custom_id": f"{tag}-{i}", "method": "POST", "url": "/v1/chat/completions",
                     "body": {"model": TINY, **body}})
    return rows


@pytest.fixture(scope="module")
def blend(make_deployment):
    return make_deployment(BLENDSERVE_PLANNER="blendserve", BLENDSERVE_WARMUP_FRACTION="0.05").start_all()


def test_blendserve_runs_two_jobs_exactly_once(blend):
    c = blend.client()
    jobs = {}
    for tag in ("a", "b"):
        rows = mixed(60, tag)
        f = c.files.create(file=(f"{tag}.jsonl", jsonl(rows)), purpose="batch")
        jobs[tag] = (rows, c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                                            completion_window="24h").id)
    for rows, bid in jobs.values():
        b = wait_batch(c, bid)
        assert b.status == "completed", b.errors
        out = read_lines(c, b.output_file_id)
        assert sorted(o["custom_id"] for o in out) == sorted(r["custom_id"] for r in rows)
        assert b.usage.input_tokens_details.cached_tokens > 0
    log = blend.log("scheduler", tail=None)
    assert "warm-up" in log and "blendserve" in log
