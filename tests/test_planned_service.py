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


@pytest.fixture(scope="module")
def dfs(make_deployment):
    return make_deployment(BLENDSERVE_PLANNER="dfs").start_all()


def _run_order(d) -> list[bytes]:
    """Prompt ids of every request in the order the plan gave the worker (chunk after chunk)."""
    import sqlalchemy as sa

    from core.db import make_engine

    url = d.env["BLENDSERVE_DATABASE_URL"] or f"sqlite:///{(d.data_dir / 'blendserve.db').resolve()}"
    eng = make_engine(url)
    with eng.connect() as c:
        rows = c.execute(sa.text("SELECT r.prompt_ids FROM requests r JOIN chunks c ON c.id = r.chunk_id "
                                 "ORDER BY c.seq, r.position")).all()
    eng.dispose()
    return [bytes(r[0]) for r in rows]


def test_dfs_runs_prompts_sorted_across_jobs(dfs):
    """Two jobs interleaving two few-shot prefixes and chat: every round's plan is one run of prompts sorted by
    token ids, across both jobs, with no warm-up; FCFS order would break the sort at every third line."""
    import numpy as np

    c = dfs.client()
    ids = []
    for tag in ("a", "b"):
        f = c.files.create(file=(f"{tag}.jsonl", jsonl(mixed(60, tag))), purpose="batch")
        ids.append(c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                                    completion_window="24h").id)
    for bid in ids:
        b = wait_batch(c, bid)
        assert b.status == "completed", b.errors
        assert len(read_lines(c, b.output_file_id)) == 60
        assert b.usage.input_tokens_details.cached_tokens > 0
    keys = [tuple(np.frombuffer(p, dtype="<i4").tolist()) for p in _run_order(dfs)]
    assert len(keys) == 120
    descents = sum(a > b for a, b in zip(keys, keys[1:]))
    log = dfs.log("scheduler", tail=None)
    rounds = log.count(" request(s) of ")
    assert "dfs " in log and "warm-up" in log and ", 0 warm-up," in log
    assert descents < rounds, (descents, rounds)
    assert descents < 10     # FCFS order of the same file has ~40
