"""The service with the BlendServe and DFS planners: every request runs exactly once, across jobs; BlendServe
warms up first and paces to the workers' step budget, or plans for prefix reuse where the engine cannot mix."""
from __future__ import annotations

import re
import time

import numpy as np
import pytest
import sqlalchemy as sa

from blendserve.core.db import make_engine
from blendserve.planner import MODELS
from blendserve.planner.perf import HARDWARE, mem_time
from blendserve.scheduler.blend import BlendServe
from blendserve.scheduler.planning import Round
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


def _db(d) -> sa.Engine:
    return make_engine(d.env["BLENDSERVE_DATABASE_URL"] or f"sqlite:///{(d.data_dir / 'blendserve.db').resolve()}")


def _set_step_tokens(d, value: int | None) -> None:
    """What a worker's engine reported as its mixed-step budget (the planner reads the worker rows)."""
    eng = _db(d)
    with eng.begin() as c:
        c.execute(sa.text("UPDATE workers SET step_tokens = :v"), {"v": value})
    eng.dispose()


def test_blendserve_runs_two_jobs_exactly_once(blend):
    _set_step_tokens(blend, 1024)
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
    rounds = re.findall(r"(\w+) \S+: \d+ request\(s\), \d+ history, (\d+) warm-up, .*, (\d+)-token steps", log)
    assert rounds and all(r[0] == "blendserve" and r[2] == "1024" for r in rounds), rounds
    assert sum(int(r[1]) for r in rounds) > 0, "cold subtrees are sampled first"
    assert "cannot mix" not in log
    eng = _db(blend)
    with eng.connect() as conn:         # the CPU engine said what it computes on: the round is priced on a CPU
        assert conn.execute(sa.text("SELECT hardware FROM workers")).scalars().all() == ["cpu"]
    eng.dispose()


def test_rounds_are_priced_on_the_workers_own_hardware():
    """A vLLM worker on a CPU is priced as a CPU, not as an H100; the configured profile wins; workers that
    differ are priced on the slowest; workers that do not say fall back to the engine's kind."""
    policy = BlendServe({})
    assert policy.hardware_profile([("w1", "vllm", 1000, "cpu")]) is HARDWARE["cpu"]
    assert policy.hardware_profile([("w1", "vllm", 1000, "h200"), ("w2", "vllm", 1000, "a100-80gb")]) \
        is HARDWARE["a100-80gb"]
    assert policy.hardware_profile([("w1", "vllm", 1000, None)]) is HARDWARE["h100-sxm"]
    assert policy.hardware_profile([("w1", "cpu", 1000, None)]) is HARDWARE["cpu"]
    assert policy.hardware_profile([("w1", "vllm", 1000, "a GPU we have no profile of")]) is HARDWARE["h100-sxm"]
    assert BlendServe({}, hardware="h200").hardware_profile([("w1", "cpu", 1000, "cpu")]) is HARDWARE["h200"]


def test_an_engine_that_cannot_mix_gets_prefix_reuse_first(blend):
    """step_tokens null: said once in the log, then the DFS order (no warm-up: lengths cannot change it)."""
    _set_step_tokens(blend, None)
    c = blend.client()
    before = blend.log("scheduler", tail=None)
    for tag in ("c", "d"):
        f = c.files.create(file=(f"{tag}.jsonl", jsonl(mixed(30, tag + "x"))), purpose="batch")
        b = wait_batch(c, c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                                           completion_window="24h").id)
        assert b.status == "completed", b.errors
    log = blend.log("scheduler", tail=None)[len(before):]
    assert log.count("cannot mix prefill and decode") == 1
    rounds = re.findall(r"(\w+) \S+: \d+ request\(s\), \d+ history, (\d+) warm-up", log)
    assert rounds and all(r == ("dfs", "0") for r in rounds), rounds


@pytest.fixture(scope="module")
def dfs(make_deployment):
    return make_deployment(BLENDSERVE_PLANNER="dfs").start_all()


def _run_order(d) -> list[bytes]:
    """Prompt ids of every request in the order the plan gave the worker (chunk after chunk)."""
    eng = _db(d)
    with eng.connect() as c:
        rows = c.execute(sa.text("SELECT r.prompt_ids FROM requests r JOIN chunks c ON c.id = r.chunk_id "
                                 "ORDER BY c.seq, r.position")).all()
    eng.dispose()
    return [bytes(r[0]) for r in rows]


def test_dfs_runs_prompts_sorted_across_jobs(dfs):
    """Two jobs interleaving two few-shot prefixes and chat: every round's plan is one run of prompts sorted by
    token ids, across both jobs, with no warm-up; FCFS order would break the sort at every third line."""
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


def _round_with_history(model: str) -> Round:
    """Two system prompts, 50 fresh requests behind each. History: behind A, 19 answers of 8 tokens and one of
    4,000 (mean 208, but the 4,000 holds nearly all of A's KV reads); behind B, 20 answers of 400 tokens."""
    def prompt(head, i):
        return np.concatenate([np.arange(head, head + 64), [50_000 + i] * 16]).astype("<i4").tobytes()
    hist = [prompt(1000, 100 + i) for i in range(20)] + [prompt(2000, 100 + i) for i in range(20)]
    out = np.array([8] * 19 + [4000] + [400] * 20, dtype=np.int64)
    prompts = [prompt(1000, i) for i in range(50)] + [prompt(2000, i) for i in range(50)]
    n = len(prompts)
    return Round(model, np.arange(1, n + 1), np.ones(n, dtype=bool), np.zeros(n, dtype=np.int64),
                 np.arange(n), np.full(n, time.time() + 86_400.0), np.full(n, 4096, dtype=np.int64), prompts,
                 (hist, out, np.full(len(out), 4096.0)), [("w1", "vllm", 400_000, None)])


def test_long_outputs_in_the_history_do_not_lift_requests_that_may_not_decode_them():
    """No shared prefix: short chats (max_tokens 256, ~40 tokens out) beside long generations (max_tokens 20,000,
    ~16K out) under one root. The long-bound observations inform only the long-bound requests (plan.tail_threshold),
    so the chats are planned at their own history's lengths, not lifted to their cap by two 16K outputs."""
    from blendserve.scheduler.blend import _lengths

    model = MODELS["llama-3.1-8b"]
    def prompt(i):
        return np.array([70_000 + i, 5, 6, 7], dtype="<i4").tobytes()
    hist = [prompt(i) for i in range(42)]
    out = np.array([30.0, 40.0, 50.0] * 13 + [16_000.0, 15_000.0, 17_000.0])
    cap = np.array([256.0] * 39 + [20_000.0] * 3)
    prompts = [prompt(1000 + i) for i in range(60)]
    mt = np.array([256] * 50 + [20_000] * 10, dtype=np.int64)
    n = len(prompts)
    r = Round(model.name, np.arange(1, n + 1), np.ones(n, dtype=bool), np.zeros(n, dtype=np.int64), np.arange(n),
              np.full(n, time.time() + 86_400.0), mt, prompts, (hist, out, cap), [("w1", "vllm", 400_000, None)])
    est, cold = _lengths(r, 1, 2048)
    assert len(cold) == n          # no shared prefix: all cold (warmed up first); the plan uses the root's history
    p, d = 4.0, out[:39]
    assert np.allclose(p * est.effective[:50] + est.effective[:50] ** 2 / 2, np.mean(p * d + d * d / 2))
    assert np.all(est.effective[:50] < 60)                       # without the split: 256, their cap
    assert np.all(np.abs(est.effective[50:] - 16_000) < 200)


def test_a_cap_the_history_shows_to_be_loose_is_no_tail_bound():
    """Chats capped at 4096 that the history shows decoding 30-50 tokens are planned at their estimates, not
    guarded at 4096 as tail (docs/design.md §3.6, loose caps); the long generations' 20,000 stays their bound, and
    so does a cap that fewer than MIN_CAP_SAMPLES observations cover."""
    from blendserve.planner.estimate import MIN_CAP_SAMPLES
    from blendserve.scheduler.blend import _lengths

    model = MODELS["llama-3.1-8b"]
    def prompt(i):
        return np.array([70_000 + i, 5, 6, 7], dtype="<i4").tobytes()

    def lengths(chat_samples: int):
        out = np.array([30.0, 40.0, 50.0] * 13 + [16_000.0, 15_000.0, 17_000.0])[-(chat_samples + 3):]
        cap = np.array([4096.0] * chat_samples + [20_000.0] * 3)
        hist = [prompt(i) for i in range(len(out))]
        mt = np.array([4096] * 50 + [20_000] * 10, dtype=np.int64)
        prompts = [prompt(1000 + i) for i in range(60)]
        r = Round(model.name, np.arange(1, 61), np.ones(60, dtype=bool), np.zeros(60, dtype=np.int64),
                  np.arange(60), np.full(60, time.time() + 86_400.0), mt, prompts, (hist, out, cap),
                  [("w1", "vllm", 400_000, None)])
        return _lengths(r, 1, 2048)[0]

    est = lengths(39)
    assert np.all(est.bound[:50] <= 60) and np.all(est.bound[:50] >= est.effective[:50])
    assert np.all(est.bound[50:] == 20_000)
    few = lengths(MIN_CAP_SAMPLES - 1)
    assert np.all(few.bound[:50] == 4096) and np.all(few.bound[50:] == 20_000)


def test_a_heavy_tail_behind_a_prefix_is_planned_as_the_memory_it_holds():
    """The blend plans on effective lengths: behind A the mean (208 tokens) would make A the compute-dense band
    and B (400) the memory-dense one, while A's expected KV reads per request are ~7x B's. The dual scan's
    compute-dense cursor admits first (a block of its band), so the plan must open with B. The round's estimate
    keeps the mean for decode tokens (linear in d) and the expected KV reads for memory (quadratic in d)."""
    model = MODELS["llama-3.1-8b"]
    policy = BlendServe({}, hardware="a100-80gb")
    policy.profiles[model.name] = model
    r = _round_with_history(model.name)
    pieces = policy.pieces(r)
    order = np.concatenate([pc.order for pc in pieces])
    assert sorted(order.tolist()) == list(range(100)), "no warm-up: every subtree has history"
    in_b = order >= 50
    assert in_b[:8].all() and not in_b.all(), "the compute-dense cursor leads, with B's band"

    est = policy.take_estimate(model.name)
    hw = HARDWARE["a100-80gb"]
    mean_a, mean_b = (19 * 8 + 4000) / 20, 400.0
    assert est.decode_tokens == pytest.approx(50 * mean_a + 50 * mean_b)
    reads_a = float(np.mean(mem_time(80.0, np.array([8] * 19 + [4000], dtype=np.float64), model, hw)))
    reads_b = float(mem_time(80.0, 400.0, model, hw))
    assert est.memory_s == pytest.approx(50 * reads_a + 50 * reads_b, rel=1e-6)


def test_every_rank_of_the_service_plan_ends_with_the_requests_their_caps_keep_short():
    """Chats capped at 4096 that the history shows decoding 1-2 tokens (a loose cap: planned at their estimates)
    beside few-shot questions capped at 16, on two workers: each rank ends with its share of the questions
    (plan.short_finish), because the service hands the planner the users' caps apart from the bounds it
    guards (Workload.bound). Without the finish the first rank's piece is chats only."""
    model = MODELS["llama-3.1-8b"]
    policy = BlendServe({}, hardware="a100-80gb")
    policy.profiles[model.name] = model
    def chat(i):
        return np.concatenate([[60_000, 61_000 + i], np.arange(3000)]).astype("<i4").tobytes()
    def question(i):
        return np.concatenate([np.arange(200), [70_000 + i] * 800]).astype("<i4").tobytes()
    hist = [chat(i) for i in range(20)] + [question(i) for i in range(20)]
    out = np.array([1.0, 2.0] * 10 + [10.0, 12.0, 14.0, 12.0] * 5)
    hist_cap = np.array([4096.0] * 20 + [16.0] * 20)
    prompts = [chat(100 + i) for i in range(200)] + [question(100 + i) for i in range(200)]
    mt = np.array([4096] * 200 + [16] * 200, dtype=np.int64)
    n = len(prompts)
    workers = [("w1", "vllm", 400_000, None), ("w2", "vllm", 400_000, None)]
    r = Round(model.name, np.arange(1, n + 1), np.ones(n, dtype=bool), np.zeros(n, dtype=np.int64), np.arange(n),
              np.full(n, time.time() + 86_400.0), mt, prompts, (hist, out, hist_cap), workers)
    pieces = policy.pieces(r)
    assert sorted(np.concatenate([pc.order for pc in pieces]).tolist()) == list(range(n))
    assert [pc.rank for pc in pieces] == [0, 1]
    for pc in pieces:
        last_chat = int(np.flatnonzero(pc.order < 200).max())
        assert last_chat < len(pc.order) - 1 and (pc.order[last_chat + 1:] >= 200).all()
